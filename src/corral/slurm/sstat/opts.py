"""sstat's command line (sstat/options.c, 22.05) -> SstatOptions."""
from __future__ import annotations

from _collections_abc import Sequence

from corral.jobref import JobIdError, JobRef, parse_job_ref, split_job_list
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import REQUIRED, Opt
from corral.slurm.common.optable import CommandSpec, check_support, parse_command_line
from corral.slurm.common.record import Record

# In sstat's long_options order: glibc lists ambiguous candidates in this order.
OPTIONS = (
    Opt("allsteps", "a"), Opt("helpformat", "e"), Opt("help", "h"), Opt("jobs", "j", REQUIRED),
    Opt("noconvert"), Opt("noheader", "n"), Opt("fields", "o", REQUIRED, aliases=("format",)),
    Opt("pidformat", "i"), Opt("parsable", "p"), Opt("parsable2", "P"), Opt("usage"), Opt("verbose", "v"),
    Opt("version", "V"),
)
SPEC = CommandSpec("sstat", OPTIONS, try_help=False,
                   ignored={"noconvert": "memory is shown in Slurm's units"},
                   unsupported=frozenset({"pidformat"}))
USAGE = """\
Usage: sstat [options] -j <job(.stepid)>
    Use --help for help
"""
# sstat.h STAT_FIELDS
DEFAULT_FIELDS = (
    "jobid,maxvmsize,maxvmsizenode,maxvmsizetask,avevmsize,maxrss,maxrssnode,maxrsstask,averss,maxpages,"
    "maxpagesnode,maxpagestask,avepages,mincpu,mincpunode,mincputask,avecpu,ntasks,avecpufreq,reqcpufreqmin,"
    "reqcpufreqmax,reqcpufreqgov,consumedenergy,maxdiskread,maxdiskreadnode,maxdiskreadtask,avediskread,"
    "maxdiskwrite,maxdiskwritenode,maxdiskwritetask,avediskwrite,tresusageinave,tresusageinmax,"
    "tresusageinmaxn,tresusageinmaxt,tresusageinmin,tresusageinminn,tresusageinmint,tresusageintot,"
    "tresusageoutave,tresusageoutmax,tresusageoutmaxn,tresusageoutmaxt,tresusageoutmin,tresusageoutminn,"
    "tresusageoutmint,tresusageouttot"
)


class SstatOptions(Record):
    fields: str = DEFAULT_FIELDS
    job_refs: tuple[JobRef, ...] = ()
    all_steps: bool = False
    header: bool = True
    parsable: str | None = None  # None, "parsable" (-p) or "parsable2" (-P)
    action: str | None = None  # "help", "usage", "version" or "helpformat"
    warnings: tuple[str, ...] = ()


def parse_sstat(argv: Sequence[str]) -> SstatOptions:
    line = parse_command_line(SPEC, argv)
    for action in ("help", "usage", "version", "helpformat"):
        if line.has(action):
            return SstatOptions(action=action)
    warnings = check_support(SPEC, line)
    given = [v for v in line.values("fields") if v is not None]
    refs = [_job_ref(item) for value in line.values("jobs") if value for item in split_job_list(value)]
    # A positional argument is a job list too (sstat's options.c takes the first one as -j).
    refs += [_job_ref(item) for value in line.positionals[:1] for item in split_job_list(value)]
    if not refs:
        raise SlurmCommandError("sstat: error: You didn't give me any jobs to stat.\n", 1)
    parsable = "parsable2" if line.has("parsable2") else "parsable" if line.has("parsable") else None
    return SstatOptions(fields=",".join(given) if given else DEFAULT_FIELDS, job_refs=tuple(refs),
                        all_steps=line.has("allsteps"), header=not line.has("noheader"), parsable=parsable,
                        warnings=tuple(warnings))


def _job_ref(item: str) -> JobRef:
    try:
        return parse_job_ref(item, steps=True)  # N, N_I (an array task), each with or without .S
    except JobIdError:
        raise SlurmCommandError(f"sstat: error: Invalid job id: {item}\n", 1) from None
