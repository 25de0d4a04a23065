"""The one set of limits on what corral accepts, enforced at every edge: the REST API's schemas
(corral.api.fields turns these into pydantic types), the agent protocol, `corral submit` and the
Slurm commands. A value inside them can be stored on every supported database and used by the
engine, the views and the agents; anything else gets an error naming the field and the limit.

Why each bound is what it is:
- integers that land in an INTEGER column (priority, time limit, node CPUs and memory) are 32-bit
  on PostgreSQL; ids in paths and lists must fit SQLite's 64-bit integers;
- uids and gids are 0..2^32-2 ((uid_t)-1 means "unchanged" to setuid and chown);
- times are finite and within what a date can show (year 9999);
- text holds no NUL (PostgreSQL's text cannot) and no lone surrogate (it cannot be encoded as
  UTF-8, so every later reply that shows it would fail);
- sizes follow the kernel (PATH_MAX, MAX_ARG_STRLEN, the 2 MiB exec budget for arguments and
  environment) and Slurm (4 MiB scripts, its ceiling on array indices).

Stdlib only and no `re`: the Slurm commands import this module on every start."""
from __future__ import annotations

from corral.jobref import MAX_ID

INT32_MAX = 2**31 - 1
INT64_MAX = MAX_ID  # the largest INTEGER the databases store

JOB_ID_MAX = MAX_ID  # job ids are 1..JOB_ID_MAX (corral.jobref parses them)
STEP_ID_MAX = 2**31  # step ids are 0..STEP_ID_MAX
UID_MAX = 2**32 - 2  # uids and gids are 0..UID_MAX
PRIORITY_MAX = INT32_MAX
TIME_LIMIT_S_MAX = INT32_MAX  # about 68 years
COUNT_MAX = INT32_MAX  # nodes, tasks, CPUs, GPUs, ranks, shares, job limits
MEM_MIB_MAX = INT32_MAX  # 2 PiB
AMOUNT_MAX = INT64_MAX  # quota amounts (a whole cluster's memory in MiB passes 2^31)
PID_MAX = INT32_MAX
EXIT_CODE_MAX = 255
SIGNAL_MAX = 64  # SIGRTMAX on Linux
TIME_MAX_S = 253402300799.0  # 9999-12-31T23:59:59Z: epoch times are 0..TIME_MAX_S
DURATION_S_MAX = float(INT32_MAX)  # grace periods, half lives and other spans of time

NAME_MAX_CHARS = 1024  # job, step, user, account, partition, QOS, queue, node names, wckey
COMMENT_MAX_CHARS = 65536  # comments, reasons, error texts
PATH_MAX_CHARS = 4095  # PATH_MAX (4096) less the NUL
ARG_MAX_CHARS = 131071  # MAX_ARG_STRLEN (128 KiB) less the NUL: one argument or one variable
ARGS_MAX_ITEMS = 65536
ARGS_MAX_BYTES = 2 * 1024 * 1024  # exec's budget (ARG_MAX with an 8 MiB stack)
ENV_MAX_VARS = 65536
ENV_MAX_BYTES = 2 * 1024 * 1024
SCRIPT_MAX_BYTES = 4 * 1024 * 1024  # Slurm's default max_script_size
LIST_MAX_ITEMS = 65536  # other lists in a request (node names, accounts, ids, GPUs)
ARRAY_INDEX_MAX = 4_000_000  # Slurm's hard ceiling on MaxArraySize - 1
# Slurm's default MaxArraySize: task indices 0..1000, so one submission makes at most 1,001 jobs
# (~40 ms of the controller's time; 100,000 tasks took 4 s in which it answered no one).
MAX_ARRAY_SIZE = 1001


class LimitError(ValueError):
    """A value outside corral's limits; the message names the field and the limit."""


def parse_int(text: str, field: str, low: int, high: int) -> int:
    """A whole number written in ASCII digits (no sign, no spaces), within [low, high]."""
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise LimitError(f"{field}: {text!r} is not a whole number from {low} to {high}")
    return int(text)


def text_problem(text: str, max_chars: int) -> str | None:
    """Why `text` cannot be stored and shown (a NUL, a lone surrogate, its length), else None."""
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains a lone surrogate at position {exc.start}, which is not valid Unicode text"
    if len(text) > max_chars:
        return f"{len(text)} characters is too long: the limit is {max_chars}"
    return None


def script_problem(text: str) -> str | None:
    problem = text_problem(text, SCRIPT_MAX_BYTES)
    if problem is None and len(text.encode("utf-8")) > SCRIPT_MAX_BYTES:
        problem = f"{len(text.encode('utf-8'))} bytes is too large: the limit is {SCRIPT_MAX_BYTES} bytes"
    return problem


def args_problem(args: list[str] | tuple[str, ...]) -> str | None:
    """What exec cannot take in a command line or a script's arguments."""
    if len(args) > ARGS_MAX_ITEMS:
        return f"{len(args)} arguments are too many: the limit is {ARGS_MAX_ITEMS}"
    total = 0
    for index, arg in enumerate(args):
        problem = text_problem(arg, ARG_MAX_CHARS)
        if problem is not None:
            return f"argument {index} {problem}"
        total += len(arg.encode("utf-8")) + 1
    if total > ARGS_MAX_BYTES:
        return f"{total} bytes of arguments are too many: the limit is {ARGS_MAX_BYTES}"
    return None


def env_problem(env: dict[str, str]) -> str | None:
    """What exec cannot take in an environment: names must be non-empty and without '='."""
    if len(env) > ENV_MAX_VARS:
        return f"{len(env)} variables are too many: the limit is {ENV_MAX_VARS}"
    total = 0
    for name, value in env.items():
        problem = text_problem(name, ARG_MAX_CHARS)
        if problem is not None:
            return f"a variable name {problem}"
        if not name or "=" in name:
            return f"{name!r} is not a variable name: it must be non-empty and without '='"
        problem = text_problem(value, ARG_MAX_CHARS)
        if problem is not None:
            return f"variable {name} {problem}"
        total += len(name.encode("utf-8")) + len(value.encode("utf-8")) + 2
    if total > ENV_MAX_BYTES:
        return f"{total} bytes of environment are too many: the limit is {ENV_MAX_BYTES}"
    return None
