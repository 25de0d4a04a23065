"""squeue's command line and environment (squeue/opts.c) -> SqueueOptions."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral.jobref import JobIdError, JobRef, parse_job_ref, split_job_list
from corral.slurm.common import states
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import OPTIONAL, REQUIRED, CommandLine, Opt
from corral.slurm.common.hostnames import checked_option
from corral.slurm.common.optable import (
    CommandSpec,
    check_support,
    parse_command_line,
    split_list,
)
from corral.slurm.common.record import Record
from corral.slurm.squeue.format import (
    DEFAULT_FORMAT,
    LONG_FORMAT,
    START_FORMAT,
    Format,
    parse_format,
    parse_long_format,
)
from corral.slurm.squeue.select import DEFAULT_SORT

# In squeue's long_options order: glibc lists ambiguous candidates in this order.
OPTIONS = (
    Opt("accounts", "A", REQUIRED), Opt("all", "a"), Opt("array", "r"), Opt("array-unique"),
    Opt("Format", "O", REQUIRED), Opt("format", "o", REQUIRED), Opt("federation"), Opt("help"),
    Opt("hide"), Opt("iterate", "i", REQUIRED), Opt("jobs", "j", OPTIONAL), Opt("json"), Opt("local"),
    Opt("long", "l"), Opt("licenses", "L", REQUIRED), Opt("cluster", "M", REQUIRED, aliases=("clusters",)),
    Opt("me"), Opt("name", "n", REQUIRED), Opt("noconvert"),
    Opt("node", "w", REQUIRED, aliases=("nodes", "nodelist")), Opt("noheader", "h"),
    Opt("partitions", "p", REQUIRED), Opt("priority", "P"), Opt("qos", "q", REQUIRED),
    Opt("reservation", "R", REQUIRED), Opt("sib", aliases=("sibling",)), Opt("sort", "S", REQUIRED),
    Opt("start"), Opt("steps", "s", OPTIONAL), Opt("states", "t", REQUIRED), Opt("usage"),
    Opt("user", "u", REQUIRED, aliases=("users",)), Opt("verbose", "v"), Opt("version", "V"), Opt("yaml"),
    Opt("accounts", "U", REQUIRED, long=False),  # -U: kept by squeue for backwards compatibility
)
SPEC = CommandSpec(
    "squeue", OPTIONS,
    ignored={"priority": "a corral job belongs to one partition", "cluster": "corral runs one cluster"},
    unsupported=frozenset({"licenses", "json", "yaml", "array-unique"}),
)
USAGE = """\
Usage: squeue [-A account] [--clusters names] [-i seconds] [--job jobid]
              [-n name] [-o format] [-p partitions] [--qos qos]
              [--reservation reservation] [--sort fields] [--start]
              [--step step_id] [-t states] [-u user_name] [--usage]
              [-L licenses] [-w nodes] [--federation] [--local] [--sibling]
\t      [-ahjlrsv]
"""
INVALID_JOB_ID = "slurm_load_jobs error: Invalid job id specified\n"  # one --jobs id the controller lacks


class SqueueOptions(Record):
    format: Format
    noheader: bool = False
    long_banner: bool = False  # -l prints the time first
    job_ids: tuple[JobRef, ...] | None = None
    job_states: frozenset[str] | None = None  # None: the unfinished ones
    users: tuple[str, ...] | None = None
    me: bool = False  # the caller fills in their own user
    names: tuple[str, ...] | None = None
    partitions: tuple[str, ...] | None = None
    accounts: tuple[str, ...] | None = None
    qos: tuple[str, ...] | None = None
    reservation: str | None = None
    nodes: str | None = None  # hostlist expression of -w
    sort: str = DEFAULT_SORT
    array: bool = False  # -r: one line per array task
    iterate_s: int | None = None
    verbose: int = 0
    action: str | None = None  # "help", "usage" or "version": print that and exit 0
    time_format: str | None = None  # SLURM_TIME_FORMAT
    warnings: tuple[str, ...] = ()  # stderr lines to print before the output
    steps: tuple[str, ...] | None = None  # -s: list steps (these `J.S` ids; empty: all) instead of jobs

    @property
    def single_job_id(self) -> int | None:
        """With exactly one --jobs id, squeue fails when the controller does not know it (INVALID_JOB_ID)."""
        return self.job_ids[0].job_id if self.job_ids and len(self.job_ids) == 1 else None


def parse_squeue(argv: Sequence[str], env: Mapping[str, str]) -> SqueueOptions:
    line = parse_command_line(SPEC, argv)
    warnings = check_support(SPEC, line)
    for action in ("help", "usage", "version"):
        if line.has(action):
            return SqueueOptions(format=parse_format(DEFAULT_FORMAT), action=action)
    jobs_text = _positional_jobs(line)
    steps = _list(line.last("steps")) or () if line.has("steps") else None
    if steps is not None:
        from corral.slurm.squeue.steps import parse_step_format

        fmt = parse_step_format(line.last("format"))
    else:
        fmt = _output_format(line, env, start=line.has("start"))
    return SqueueOptions(
        format=fmt, noheader=line.has("noheader"), long_banner=line.has("long") or line.has("iterate"),
        job_ids=_job_ids(jobs_text), job_states=_states(line.last("states") or env.get("SQUEUE_STATES"),
                                                        start=line.has("start")),
        users=_list(line.last("user") or env.get("SQUEUE_USERS")), me=line.has("me"),
        names=_list(line.last("name") or env.get("SQUEUE_NAMES")),
        partitions=_list(line.last("partitions") or env.get("SQUEUE_PARTITION")),
        accounts=_list(line.last("accounts") or env.get("SQUEUE_ACCOUNT")),
        qos=_list(line.last("qos") or env.get("SQUEUE_QOS")), reservation=line.last("reservation"),
        nodes=checked_option("squeue", "--nodelist", line.last("node")),
        sort=line.last("sort") or env.get("SQUEUE_SORT") or ("S" if line.has("start") else DEFAULT_SORT),
        array=line.has("array") or "SQUEUE_ARRAY" in env, iterate_s=_iterate(line.last("iterate")),
        verbose=line.count("verbose"), time_format=env.get("SLURM_TIME_FORMAT"),
        warnings=tuple(warnings) + fmt.errors, steps=steps,
    )


def _positional_jobs(line: CommandLine) -> str | None:
    """`-j 12` leaves 12 positional (the value is optional); squeue then takes it as the job list."""
    jobs_text = line.last("jobs")
    positionals = list(line.positionals)
    if positionals and line.has("jobs") and jobs_text is None:
        jobs_text = positionals.pop(0)
    if positionals:
        raise SlurmCommandError(f"squeue: error: Unrecognized option: {positionals[0]}\n", 1, stdout=USAGE)
    return jobs_text


def _output_format(line: CommandLine, env: Mapping[str, str], *, start: bool) -> Format:
    short, long_spec = line.last("format"), line.last("Format")
    if short is not None and long_spec is not None:
        # squeue stops at the later of the two and names it first.
        names = {"format": "-o (--format)", "Format": "-O (--Format)"}
        earlier = next(k for k, _ in line.options if k in names)
        later = "Format" if earlier == "format" else "format"
        raise SlurmCommandError(f"squeue: error: {names[later]} is incompatible with {names[earlier]}\n", 1)
    if line.has("long") and short is not None:
        raise SlurmCommandError("squeue: fatal: Options -o(--format) and -l(--long) are mutually exclusive. "
                                "Please remove one and retry.\n", 1)
    if long_spec is not None:
        return parse_long_format(long_spec)
    if short is not None:
        return parse_format(short)
    if line.has("long"):
        return parse_format(LONG_FORMAT)
    if not start and "SQUEUE_FORMAT" in env:
        return parse_format(env["SQUEUE_FORMAT"])
    if not start and "SQUEUE_FORMAT2" in env:
        return parse_long_format(env["SQUEUE_FORMAT2"])
    return parse_format(START_FORMAT if start else DEFAULT_FORMAT)


def _job_ids(text: str | None) -> tuple[JobRef, ...] | None:
    """`N`, `N_I` or `N_[I-J,K]`, comma-separated. Stricter than squeue's strtol, which reads `12abc`
    as 12 and `12_[1-3]` as task 0: an id that is not one of these forms is refused (corral.jobref)."""
    if text is None:
        return None
    return tuple(_job_ref(item) for item in split_job_list(text))


def _job_ref(item: str) -> JobRef:
    try:
        return parse_job_ref(item, task_lists=True)
    except JobIdError:
        raise SlurmCommandError(f"squeue: error: Invalid job id: {item}\n", 1) from None


def _strtol(text: str) -> tuple[int, str, str]:
    """C's strtol on a decimal prefix: (value, digits, rest); no digits reads as 0."""
    digits = text[: len(text) - len(text.lstrip("0123456789"))]
    return int(digits or 0), digits, text[len(digits):]


def _states(text: str | None, *, start: bool) -> frozenset[str] | None:
    if text is None:
        return frozenset({"PENDING"}) if start else None
    if text.lower() == "all":
        return frozenset(states.VALID_STATES_MESSAGE_ORDER)
    found = set()
    for item in split_list(text):
        state = states.parse_job_state(item)
        if state is None:
            valid = ",".join(states.VALID_STATES_MESSAGE_ORDER)
            raise SlurmCommandError(f"squeue: error: Invalid job state specified: {item}\n"
                                    f"squeue: error: Valid job states include: {valid}\n\n", 1)
        found.add(state)
    return frozenset(found)


def _list(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else split_list(text)


def _iterate(text: str | None) -> int | None:
    if text is None:
        return None
    seconds = _strtol(text)[0]
    if seconds <= 0:
        raise SlurmCommandError(f"squeue: error: --iterate={text}\n\n", 1)
    return seconds
