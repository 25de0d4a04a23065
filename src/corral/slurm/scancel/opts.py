"""scancel's command line (scancel/opt.c) -> ScancelOptions.

Exit rules the callers rely on (submitit checks the status): without --signal or a filter, an
unknown or finished id is skipped silently and scancel exits 0; with either, the same id prints
`Kill job error on job id N: Invalid job id specified` and scancel exits 1 (KILL_JOB_ERROR)."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral.jobref import JobIdError, JobRef, ascii_number, parse_job_ref, split_job_list
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import REQUIRED, Opt
from corral.slurm.common.hostnames import checked_option
from corral.slurm.common.optable import CommandSpec, check_support, parse_command_line, split_list
from corral.slurm.common.record import Record

# In scancel's long_options order (glibc lists `--s` as sibling, signal, state).
OPTIONS = (
    Opt("account", "A", REQUIRED), Opt("batch", "b"), Opt("ctld"), Opt("full", "f"), Opt("help"),
    Opt("hurry", "H"), Opt("interactive", "i"), Opt("cluster", "M", REQUIRED, aliases=("clusters",)),
    Opt("me"), Opt("name", "n", REQUIRED), Opt("nodelist", "w", REQUIRED), Opt("partition", "p", REQUIRED),
    Opt("qos", "q", REQUIRED), Opt("quiet", "Q"), Opt("reservation", "R", REQUIRED),
    Opt("sibling", None, REQUIRED), Opt("signal", "s", REQUIRED), Opt("state", "t", REQUIRED),
    Opt("usage"), Opt("user", "u", REQUIRED), Opt("verbose", "v"), Opt("version", "V"),
    Opt("wckey", None, REQUIRED),
)
SPEC = CommandSpec("scancel", OPTIONS, ignored={"hurry": "corral has no burst buffers"},
                   unsupported=frozenset({"interactive", "sibling"}))
FILTERS = ("account", "name", "nodelist", "partition", "qos", "reservation", "state", "user", "wckey", "me")
_STATES = {"PENDING": "PENDING", "PD": "PENDING", "RUNNING": "RUNNING", "R": "RUNNING",
           "SUSPENDED": "SUSPENDED", "S": "SUSPENDED"}


class ScancelOptions(Record):
    jobs: tuple[JobRef, ...] = ()
    signal: int | None = None
    batch: bool = False  # -b: signal the batch shell only
    full: bool = False  # -f: the batch shell and every step
    filters: Mapping[str, tuple[str, ...]] = {}
    me: bool = False
    quiet: bool = False
    verbose: int = 0
    action: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def strict(self) -> bool:
        """Unknown ids are errors (exit 1) once a signal or a filter is given."""
        return self.signal is not None or bool(self.filters) or self.me


def kill_job_error(job_text: str, reason: str = "Invalid job id specified") -> str:
    return f"scancel: error: Kill job error on job id {job_text}: {reason}\n"


def parse_scancel(argv: Sequence[str], env: Mapping[str, str]) -> ScancelOptions:
    line = parse_command_line(SPEC, argv)
    for action in ("help", "usage", "version"):
        if line.has(action):
            return ScancelOptions(action=action)
    warnings = check_support(SPEC, line)
    # Filters come from the options, else from SCANCEL_<NAME> variables, as in scancel.
    filters = {k: split_list(line.last(k) or env.get(f"SCANCEL_{k.upper()}")) for k in FILTERS
               if k != "me" and (line.has(k) or f"SCANCEL_{k.upper()}" in env)}
    if "state" in filters:
        filters["state"] = tuple(_state(s) for s in filters["state"])
    for expression in filters.get("nodelist", ()):
        checked_option("scancel", "--nodelist", expression)
    jobs = tuple(_job_ref(item) for text in line.positionals for item in split_job_list(text))
    signal_text = line.last("signal")
    options = ScancelOptions(
        jobs=jobs, signal=parse_signal(signal_text) if signal_text else None,
        batch=line.has("batch") or "SCANCEL_BATCH" in env, full=line.has("full") or "SCANCEL_FULL" in env,
        filters=filters, me=line.has("me"), quiet=line.has("quiet"), verbose=line.count("verbose"),
        warnings=tuple(warnings),
    )
    if not jobs and not filters and not options.me:
        raise SlurmCommandError("scancel: error: No job identification provided\n", 1)
    return options


def parse_signal(text: str) -> int:
    """`USR2`, `SIGUSR2`, `usr2` or a number -> the signal number; Slurm's message otherwise."""
    number = ascii_number(text)
    if number:
        return number
    import signal as signals  # only --signal needs it; the module costs start-up time (enum)
    upper = text.upper()
    found = getattr(signals, upper if upper.startswith("SIG") else f"SIG{upper}", None)
    if not isinstance(found, signals.Signals):
        raise SlurmCommandError(f"Unknown job signal: {text}\n", 1)
    return int(found)


def _job_ref(text: str) -> JobRef:
    """`123`, `123_4`, `123_[1-3]`, `123_*`, `123.0`, `123_4.batch` (corral.jobref: ASCII digits only)."""
    try:
        return parse_job_ref(text, task_lists=True, all_tasks=True, steps=True)
    except JobIdError:
        raise SlurmCommandError(f"scancel: error: Invalid job id {text}\n", 1) from None


def _state(text: str) -> str:
    state = _STATES.get(text.upper())
    if state is None:
        raise SlurmCommandError(f"Invalid job state specified: {text}\n"
                                "Valid job states are PENDING, RUNNING, and SUSPENDED\n", 1)
    return state
