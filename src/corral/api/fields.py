"""corral.limits as pydantic field types, for the REST API's bodies and parameters and the agent
protocol: every number bounded, every float finite, every text free of NUL and lone surrogates and
of a bounded size. The bounds show in the OpenAPI schema (minimum, maximum, maxLength)."""
from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from corral import limits


def _valid(problem_of, kind: type = object):
    """A validator raising the problem corral.limits finds in a value of type `kind`."""
    def check(value):
        problem = problem_of(value) if isinstance(value, kind) else None
        if problem is not None:
            raise ValueError(problem)
        return value

    return check


def _diagnostic(text: object) -> object:
    """An agent's error text is its own report of what went wrong, often quoting a path or an
    argument: made storable (NUL and lone surrogates escaped) and cut to the comment limit, marked,
    rather than refused, which would leave the agent retrying its report for ever."""
    if not isinstance(text, str):
        return text
    text = text.replace("\x00", "\\0").encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > limits.COMMENT_MAX_CHARS:
        marker = " [cut]"
        text = text[: limits.COMMENT_MAX_CHARS - len(marker)] + marker
    return text


def _text_check(max_chars: int) -> BeforeValidator:
    # Checked before pydantic's own string check, which refuses a lone surrogate without saying so.
    return BeforeValidator(_valid(lambda text: limits.text_problem(text, max_chars), str))


# Spelled out (not built by a helper function) so that type checkers see str and int.
Name = Annotated[str, Field(min_length=0, max_length=limits.NAME_MAX_CHARS), _text_check(limits.NAME_MAX_CHARS)]
Comment = Annotated[str, Field(min_length=0, max_length=limits.COMMENT_MAX_CHARS),
                    _text_check(limits.COMMENT_MAX_CHARS)]
Diagnostic = Annotated[str, BeforeValidator(_diagnostic), Field(max_length=limits.COMMENT_MAX_CHARS)]
FilePath = Annotated[str, Field(min_length=0, max_length=limits.PATH_MAX_CHARS), _text_check(limits.PATH_MAX_CHARS)]


def _absolute_directory(path: str) -> str:
    """The controller, and an agent on another host, cannot tell what a relative directory is relative
    to: the submitting client resolves it against its own working directory (sbatch -D's rule)."""
    if not path.startswith("/"):
        raise ValueError(f"the working directory must be an absolute path, not '{path}' (a client resolves a "
                         "relative --chdir against its own working directory)")
    return path


WorkDir = Annotated[str, Field(min_length=1, max_length=limits.PATH_MAX_CHARS), _text_check(limits.PATH_MAX_CHARS),
                    AfterValidator(_absolute_directory)]
Script = Annotated[str, Field(max_length=limits.SCRIPT_MAX_BYTES), BeforeValidator(_valid(limits.script_problem, str))]
Args = Annotated[list[str], Field(max_length=limits.ARGS_MAX_ITEMS), AfterValidator(_valid(limits.args_problem))]
Env = Annotated[dict[str, str], Field(max_length=limits.ENV_MAX_VARS), AfterValidator(_valid(limits.env_problem))]
Names = Annotated[list[Name], Field(max_length=limits.LIST_MAX_ITEMS)]

JobId = Annotated[int, Field(ge=1, le=limits.JOB_ID_MAX)]
StepId = Annotated[int, Field(ge=0, le=limits.STEP_ID_MAX)]
Uid = Annotated[int, Field(ge=0, le=limits.UID_MAX)]
Priority = Annotated[int, Field(ge=0, le=limits.PRIORITY_MAX)]
TimeLimitS = Annotated[int, Field(ge=1, le=limits.TIME_LIMIT_S_MAX)]
Count = Annotated[int, Field(ge=1, le=limits.COUNT_MAX)]  # at least one (nodes, tasks, CPUs per task)
Amount = Annotated[int, Field(ge=0, le=limits.COUNT_MAX)]  # zero or more (GPUs, ranks, indices, limits)
MemMib = Annotated[int, Field(ge=0, le=limits.MEM_MIB_MAX)]
Pid = Annotated[int, Field(ge=0, le=limits.PID_MAX)]
Index = Annotated[int, Field(ge=0, le=limits.COUNT_MAX)]  # ranks, device indices
ExitCode = Annotated[int, Field(ge=0, le=limits.EXIT_CODE_MAX)]
Signal = Annotated[int, Field(ge=0, le=limits.SIGNAL_MAX)]
Port = Annotated[int, Field(ge=1, le=65535)]
EpochS = Annotated[float, Field(ge=0, le=limits.TIME_MAX_S, allow_inf_nan=False)]
DurationS = Annotated[float, Field(ge=0, le=limits.DURATION_S_MAX, allow_inf_nan=False)]
