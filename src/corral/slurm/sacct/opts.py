"""sacct's command line and environment (sacct/options.c) -> SacctOptions."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral.jobref import JobIdError, JobRef, parse_job_ref, split_job_list
from corral.slurm.common import states
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import OPTIONAL, REQUIRED, CommandLine, Opt
from corral.slurm.common.hostnames import checked_option
from corral.slurm.common.optable import CommandSpec, check_support, parse_command_line, split_list
from corral.slurm.common.record import Record
from corral.slurm.sacct.format import (
    BRIEF_FIELDS,
    DEFAULT_FIELDS,
    LONG_FIELDS,
    PARSABLE,
    PARSABLE2,
    Layout,
    parse_fields,
)

# In sacct's long_options order: glibc lists ambiguous candidates in this order.
OPTIONS = (
    Opt("allusers", "a"), Opt("accounts", "A", REQUIRED), Opt("allocations", "X"), Opt("brief", "b"),
    Opt("batch-script", "B"), Opt("completion", "c"), Opt("constraints", "C", REQUIRED),
    Opt("delimiter", None, REQUIRED), Opt("duplicates", "D"), Opt("env-vars"), Opt("federation"),
    Opt("helpformat", "e", aliases=("help-fields",)), Opt("endtime", "E", REQUIRED), Opt("file", "f", REQUIRED),
    Opt("flags", "F", REQUIRED), Opt("gid", "g", REQUIRED, aliases=("group",)), Opt("help", "h"),
    Opt("json"), Opt("local"), Opt("name", None, REQUIRED), Opt("nnodes", "i", REQUIRED),
    Opt("ncpus", "I", REQUIRED), Opt("jobs", "j", REQUIRED), Opt("timelimit-min", "k", REQUIRED),
    Opt("timelimit-max", "K", REQUIRED), Opt("long", "l"), Opt("allclusters", "L"),
    Opt("cluster", "M", REQUIRED, aliases=("clusters",)), Opt("nodelist", "N", REQUIRED), Opt("noconvert"),
    Opt("units", None, REQUIRED), Opt("noheader", "n"), Opt("fields", "o", REQUIRED, aliases=("format",)),
    Opt("parsable", "p"), Opt("parsable2", "P"), Opt("qos", "q", REQUIRED), Opt("partition", "r", REQUIRED),
    Opt("reason", "R", REQUIRED), Opt("state", "s", REQUIRED), Opt("starttime", "S", REQUIRED),
    Opt("truncate", "T"), Opt("uid", "u", REQUIRED, aliases=("user",)), Opt("usage", "U"),
    Opt("verbose", "v"), Opt("version", "V"), Opt("wckeys", "W", REQUIRED),
    Opt("whole-hetjob", None, OPTIONAL), Opt("associations", "x", REQUIRED), Opt("yaml"),
)
SPEC = CommandSpec(
    "sacct", OPTIONS, try_help=False,
    ignored={"truncate": "times are not truncated to the window", "units": "memory is shown in Slurm's units",
             "noconvert": "memory is shown in Slurm's units"},
    unsupported=frozenset({"batch-script", "completion", "constraints", "env-vars", "file", "flags", "gid",
                           "json", "yaml", "nnodes", "ncpus", "timelimit-min", "timelimit-max", "reason",
                           "wckeys", "associations"}),
)


class SacctOptions(Record):
    layout: Layout
    job_ids: tuple[JobRef, ...] | None = None  # None: no -j (time window applies)
    job_states: frozenset[str] | None = None
    all_users: bool = False
    users: tuple[str, ...] | None = None
    accounts: tuple[str, ...] | None = None
    partitions: tuple[str, ...] | None = None
    qos: tuple[str, ...] | None = None
    names: tuple[str, ...] | None = None
    nodes: str | None = None  # hostlist expression of -N
    start_text: str | None = None  # -S/-E as typed; the caller reads them as Slurm times
    end_text: str | None = None
    duplicates: bool = False
    action: str | None = None  # "help", "usage", "version" or "helpformat"
    time_format: str | None = None
    warnings: tuple[str, ...] = ()


def parse_sacct(argv: Sequence[str], env: Mapping[str, str]) -> SacctOptions:
    line = parse_command_line(SPEC, argv)
    if line.positionals:
        junk = "".join(f"sacct: error:  {p}\n" for p in line.positionals)
        raise SlurmCommandError(f"sacct: error: Unknown arguments:\n{junk}", 1)
    warnings = check_support(SPEC, line)
    for action in ("help", "usage", "version", "helpformat"):
        if line.has(action):
            return SacctOptions(layout=Layout(parse_fields(DEFAULT_FIELDS)), action=action)
    return SacctOptions(
        layout=_layout(line, env), job_ids=_job_ids(line), job_states=_states(line.last("state")),
        all_users=line.has("allusers"), users=_joined(line, "uid"), accounts=_joined(line, "accounts"),
        partitions=_joined(line, "partition"), qos=_joined(line, "qos"), names=_joined(line, "name"),
        nodes=checked_option("sacct", "--nodelist", line.last("nodelist")), start_text=line.last("starttime"),
        end_text=line.last("endtime"),
        duplicates=line.has("duplicates"), time_format=env.get("SLURM_TIME_FORMAT"), warnings=tuple(warnings),
    )


def _layout(line: CommandLine, env: Mapping[str, str]) -> Layout:
    # Repeated -o options add up, as sacct appends each to its field list.
    given = [v for v in line.values("fields") if v is not None]
    if given:
        spec = ",".join(given)
    elif line.has("brief"):
        spec = BRIEF_FIELDS
    elif line.has("long"):
        spec = LONG_FIELDS
    else:
        spec = env.get("SACCT_FORMAT") or DEFAULT_FIELDS
    parsable = PARSABLE2 if line.has("parsable2") else PARSABLE if line.has("parsable") else None
    return Layout(parse_fields(spec), parsable=parsable, delimiter=line.last("delimiter") or "|",
                  header=not line.has("noheader"), steps=not line.has("allocations"))


def _joined(line: CommandLine, key: str) -> tuple[str, ...] | None:
    values = [v for v in line.values(key) if v is not None]
    return tuple(item for v in values for item in split_list(v)) if values else None


def _job_ids(line: CommandLine) -> tuple[JobRef, ...] | None:
    """`-j` takes comma lists and may be repeated (submitit repeats it). Steps select their job."""
    values = [v for v in line.values("jobs") if v is not None]
    if not values:
        return None
    return tuple(_job_spec(item) for value in values for item in split_job_list(value))


def _job_spec(item: str) -> JobRef:
    """`JOB[_TASK|_[ranges]][.STEP]` (corral.jobref: ASCII digits only)."""
    try:
        return parse_job_ref(item, task_lists=True, steps=True)
    except JobIdError:
        raise SlurmCommandError(f"sacct: fatal: Bad job/step specified: {item}\n", 1) from None


def _states(text: str | None) -> frozenset[str] | None:
    if text is None:
        return None
    found = set()
    for item in split_list(text):
        state = states.parse_job_state(item)
        if state is None:
            raise SlurmCommandError(f"sacct: fatal: unrecognized job state value '{item}'\n", 1)
        found.add(state)
    return frozenset(found)
