"""sbatch option values -> JobSubmit values, failing with sbatch's own messages and exit statuses.

sbatch rejects some values itself (exit 255 after `Invalid --time specification`, exit 1 after
`Invalid numeric value`) and leaves others to slurmctld (`Batch job submission failed: ...`, exit
1); corral checks both here, before anything is sent. The unit parsing is corral.jobscript's
(units; GPU counts: corral.jobscript.values). Modules only some values need (units, signal,
jobids, `re` for --dependency) are imported by the converters that use them: sbatch starts on
every submission, and `re` alone (with enum) costs it ~7 ms."""
from __future__ import annotations

from corral import gpu_models, limits
from corral.jobscript.errors import DirectiveError
from corral.slurm.common.errors import SlurmCommandError

_DEPENDENCY = (
    r"(?:singleton|(?:after|afterany|afterok|afternotok|aftercorr|afterburstbuffer)"
    r"(?::[0-9]+(?:_[0-9]+)?(?:\+[0-9]+)?)+|expand:[0-9]+)"
)
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
SIGNAL_DEFAULT_TIME_S = 60  # sbatch's default warning time for --signal without @time


def fail(message: str, exit_code: int = 255) -> SlurmCommandError:
    return SlurmCommandError(f"sbatch: error: {message}\n", exit_code)


def rejected(message: str) -> SlurmCommandError:
    """What slurmctld's refusal looks like."""
    return fail(f"Batch job submission failed: {message}", 1)


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()  # str.isdigit alone takes '²', which int() refuses


def count(value: str, option: str, high: int = limits.COUNT_MAX) -> int:
    if not _is_number(value) or int(value) < 1:
        raise fail(f'Invalid numeric value "{value}" for --{option}.', 1)
    if int(value) > high:
        raise fail(f"Numeric argument ({value}) to big for --{option}: corral's limit is {high}.", 1)
    return int(value)


def priority(value: str, option: str) -> int:
    """sbatch's own checks (slurm_opt.c: arg_set_priority), with corral's ceiling."""
    if not _is_number(value):
        raise fail(f'Invalid numeric value "{value}" for --{option}.', 1)
    if int(value) > limits.PRIORITY_MAX:
        raise fail(f"Priority must be < {limits.PRIORITY_MAX + 1}")
    return int(value)


def node_count(value: str, option: str) -> int:
    """`N` or `min-max`; corral schedules the minimum."""
    low, _, high = value.partition("-")
    if not _is_number(low) or (high and not _is_number(high)) or int(low) < 1:
        raise fail(f'"{value}" is not a valid node count')
    if int(low) > limits.COUNT_MAX:
        raise fail(f'"{value}" is not a valid node count: corral\'s limit is {limits.COUNT_MAX}')
    return int(low)


def _explained(option: str, exc: DirectiveError) -> SlurmCommandError:
    """sbatch's `Invalid --OPT specification`, with corral's reason where the value was well formed
    but is refused (unlimited, above a limit)."""
    if exc.reason.startswith("expected"):
        return fail(f"Invalid --{option} specification")
    return fail(f"Invalid --{option} specification: {exc.reason}")


def time_limit(value: str, option: str) -> int:
    from corral.jobscript.units import parse_time_s

    try:
        return parse_time_s(value)
    except DirectiveError as exc:
        raise _explained(option, exc) from None


def memory(value: str, option: str) -> int:
    from corral.jobscript.units import parse_mem_mib

    try:
        return parse_mem_mib(value)
    except DirectiveError as exc:
        raise _explained(option, exc) from None


def gpus(value: str, option: str) -> object:
    """A GPU count, with its type when written `a100:8` (a GpuRequest)."""
    try:
        return _values().gpu_count(value)
    except DirectiveError as exc:
        detail = "" if exc.reason.startswith("expected") else f": {exc.reason}"
        raise rejected(f"Invalid generic resource (gres) specification{detail}") from None


def gres(value: str, option: str) -> object:
    try:
        return _values().gres_gpus(value)
    except DirectiveError as exc:
        raise fail(f"Invalid generic resource (gres) specification: {exc.reason}", 1) from None


def split_gpu_models(fields: dict) -> dict:
    """GPU counts written with a type set the count and JobSubmit.gpu_model (one type per job); a
    share of one GPU (--gres=shard:N, mps:P) sets JobSubmit.gpu_share."""
    try:
        _values().apply_gpu_share(fields)
    except DirectiveError as exc:
        raise rejected(f"Invalid generic resource (gres) specification: {exc.reason}") from None
    written = []
    for name in ("gpus", "gpus_per_node", "gpus_per_task"):
        value = fields.get(name)
        if hasattr(value, "count"):  # a GpuRequest; older corral.jobscript versions return the int
            fields[name] = value.count
            if value.model:
                written.append(value.model)
    models = gpu_models.distinct(written)  # `h100` and `H100` are one type
    if len(models) > 1:
        raise fail(f"conflicting GPU types: {', '.join(sorted(models))}", 1)
    if models:
        fields["gpu_model"] = models[0]
    return fields


EXPEDITE = "expedite"


def requeue(value: str | None, option: str) -> bool | str:
    """--requeue, or Slurm 25.11's --requeue=expedite (held for split_requeue)."""
    if value is None:
        return True
    if value == EXPEDITE:
        return EXPEDITE
    raise fail(f"Invalid --{option} specification")


def split_requeue(fields: dict) -> dict:
    """The merged --requeue/--no-requeue (the last one wins): --requeue=expedite sets JobSubmit.requeue and
    JobSubmit.expedited_requeue."""
    if fields.get("requeue") == EXPEDITE:
        fields["requeue"], fields["expedited_requeue"] = True, True
    return fields


def acctg_freq(value: str, option: str) -> int | None:
    from corral.jobscript.values import acctg_task_s

    try:
        return acctg_task_s(value)
    except DirectiveError as exc:
        raise fail(f"Invalid --{option} specification: {exc.reason}") from None


def text(value: str, option: str) -> str:
    return value


def container(value: str, option: str) -> str:
    """A --container-* value (pyxis's grammar, corral.container_options), checked before anything is sent."""
    from corral import container_options as c

    checks = {"container-mounts": c.parse_mounts, "container-env": c.parse_env_names,
              "container-name": c.check_name, "container-workdir": c.check_workdir}
    if not value.strip():
        raise fail(f"--{option}: expected a non-empty value", 1)
    try:
        checks.get(option, str)(value)
    except c.ContainerOptionError as exc:
        raise fail(str(exc), 1) from None
    if option == "container-image":
        return _image_path(value)
    return value


def _image_path(value: str) -> str:
    """A local image file named relative to where the command runs, made absolute: the node's agent reads
    it, and its working directory is not the user's. Registry references and absolute paths pass as given."""
    import os

    if not os.path.isabs(value) and (value.startswith(("./", "../")) or os.path.isfile(value)):
        return os.path.abspath(value)
    return value


def partition(value: str, option: str) -> str:
    if "," in value:
        raise fail("invalid partition specified: corral takes one partition per job, not a list", 1)
    return value


def array(value: str, option: str) -> str:
    from corral.slurm.common import jobids

    try:
        jobids.parse_task_spec(value)
    except jobids.ArraySizeError as exc:  # Slurm's text, and corral's reason: the limit
        raise rejected(f"Invalid job array specification: {exc}") from None
    except ValueError:
        raise rejected("Invalid job array specification") from None
    return value


def dependency(value: str, option: str) -> str:
    import re

    items = re.split(r"[,?]", value)
    if not all(re.fullmatch(_DEPENDENCY, item) for item in items):
        raise rejected("Job dependency problem")
    return value


def signal_spec(value: str, option: str) -> str:
    """`[R|B:]SIG[@seconds]` (submitit: `USR2@90`), checked; JobSubmit.signal takes the text."""
    parse_signal_spec(value, option)
    return value


def parse_signal_spec(value: str, option: str = "signal") -> dict:
    """`B:USR2@90` -> {"signal": 12, "time_s": 90, "batch_only": True, "reservation": False}."""
    # `(?:([RB]{1,2}):)?([A-Za-z0-9]+)(?:@(\d+))?`, matched by hand (no `re`).
    flags, colon, rest = value.rpartition(":")
    name, at, time_text = rest.partition("@")
    valid = ((not colon or (0 < len(flags) < 3 and set(flags) <= {"R", "B"}))
             and name != "" and set(name) <= _ALNUM and (not at or time_text.isdecimal()))
    number = _signal_number(name) if valid else None
    if number is None:
        raise fail(f"Invalid --{option} specification")
    time_s = int(time_text) if at else SIGNAL_DEFAULT_TIME_S
    return {"signal": number, "time_s": time_s, "batch_only": "B" in flags, "reservation": "R" in flags}


def _signal_number(name: str) -> int | None:
    """The number of a signal name (`USR2`, `SIGUSR2`, any case) or number. From `_signal`, the C
    module under `signal`: `signal` builds enums at import (~4 ms), and submitit sends --signal."""
    import _signal

    if name.isdigit():
        return int(name) if 0 < int(name) < 65 else None
    upper = name.upper()
    key = upper if upper.startswith("SIG") else f"SIG{upper}"
    # signal.Signals holds the SIG* names but not SIG_DFL, SIG_IGN, SIG_BLOCK, ... (handlers, masks).
    found = None if key.startswith("SIG_") else getattr(_signal, key, None)
    return found if type(found) is int else None


def open_mode(value: str, option: str) -> str:
    # Slurm reads the first letter only.
    if value[:1] in ("a", "A"):
        return "append"
    if value[:1] in ("t", "T"):
        return "truncate"
    raise fail(f"Invalid --{option} specification")


def exclusive(value: str | None, option: str) -> bool:
    """--exclusive: whole nodes for the job alone. Slurm's =user and =mcs (sharing nodes with one's own
    jobs) are not corral's."""
    if value is None:
        return True
    if value in ("user", "mcs"):
        raise fail(f"--{option}={value} is not supported by corral: only --exclusive, whole nodes for the "
                   f"job alone", 1)
    raise fail(f"Invalid --{option} specification")


def _values():
    from corral.jobscript import values

    return values
