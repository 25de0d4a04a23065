"""sprio's command line and environment (sprio/opts.c, 22.05) -> SprioOptions."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral.jobref import JobIdError, JobRef, parse_job_ref, split_job_list
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import OPTIONAL, REQUIRED, CommandLine, Opt
from corral.slurm.common.optable import CommandSpec, check_support, parse_command_line, split_list
from corral.slurm.common.record import Record

# In sprio's long_options order: glibc lists ambiguous candidates in this order.
OPTIONS = (
    Opt("noheader", "h"), Opt("jobs", "j", OPTIONAL), Opt("long", "l"),
    Opt("cluster", "M", REQUIRED, aliases=("clusters",)), Opt("norm", "n"), Opt("format", "o", REQUIRED),
    Opt("sort", "S", REQUIRED), Opt("partition", "p", REQUIRED), Opt("user", "u", REQUIRED, aliases=("users",)),
    Opt("verbose", "v"), Opt("version", "V"), Opt("weights", "w"), Opt("federation"), Opt("help"),
    Opt("local"), Opt("sib", aliases=("sibling",)), Opt("usage"),
)
SPEC = CommandSpec("sprio", OPTIONS, ignored={"cluster": "corral runs one cluster"})
USAGE = """\
Usage: sprio [-j jid[s]] [-u user_name[s]] [-o format] [-p partitions]
   [--federation] [--local] [--sibling] [--usage] [-hlnvVw]
"""


class SprioOptions(Record):
    format: str | None = None  # None: the default layout, which depends on the weights
    long: bool = False
    normalized: bool = False
    noheader: bool = False
    job_ids: tuple[JobRef, ...] | None = None
    users: tuple[str, ...] | None = None
    partitions: tuple[str, ...] | None = None
    sort: str = "i"
    weights: bool = False  # -w: the weights instead of the jobs
    action: str | None = None  # "help", "usage" or "version"
    warnings: tuple[str, ...] = ()


def parse_sprio(argv: Sequence[str], env: Mapping[str, str]) -> SprioOptions:
    line = parse_command_line(SPEC, argv)
    for action in ("help", "usage", "version"):
        if line.has(action):
            return SprioOptions(action=action)
    warnings = check_support(SPEC, line)
    if line.has("long") and line.has("format"):
        raise SlurmCommandError("sprio: fatal: Options -o(--format) and -l(--long) are mutually exclusive. "
                                "Please remove one and retry.\n", 1)
    explicit_format = line.last("format")
    if explicit_format is None and not line.has("long"):
        explicit_format = env.get("SPRIO_FORMAT")
    users, partitions = line.last("user"), line.last("partition")
    return SprioOptions(
        format=explicit_format, long=line.has("long"), normalized=line.has("norm"), noheader=line.has("noheader"),
        job_ids=_job_ids(_jobs_text(line)), users=split_list(users) if users is not None else None,
        partitions=split_list(partitions) if partitions is not None else None, sort=line.last("sort") or "i",
        weights=line.has("weights"), warnings=tuple(warnings),
    )


def _jobs_text(line: CommandLine) -> str | None:
    """`-j 12` leaves 12 positional (the value is optional); sprio then takes it as the job list."""
    text = line.last("jobs")
    positionals = list(line.positionals)
    if positionals and line.has("jobs") and text is None:
        text = positionals.pop(0)
    if positionals:
        raise SlurmCommandError(f"sprio: error: Unrecognized option: {positionals[0]}\n", 1, stdout=USAGE)
    return text


def _job_ids(text: str | None) -> tuple[JobRef, ...] | None:
    """`12,13_4,14_[1-2],15.0`: ids in Slurm's forms (corral.jobref); a step selects its job."""
    if text is None:
        return None
    refs = []
    for item in split_job_list(text):
        try:
            refs.append(parse_job_ref(item, task_lists=True, steps=True))
        except JobIdError:
            raise SlurmCommandError(f"sprio: error: Invalid job id: {item}\n", 1) from None
    return tuple(refs)
