"""sreport's command line (sreport/sreport.c, 22.05): options, then one report and its conditions,
`sreport [-nPp] [-t FORMAT] [-T TRES] cluster|user REPORT [start=..] [end=..] [accounts=..] ...`."""
from __future__ import annotations

from _collections_abc import Sequence

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import REQUIRED, Opt
from corral.slurm.common.optable import CommandSpec, check_support, parse_command_line, split_list
from corral.slurm.common.printfields import NOT_PARSABLE, PARSABLE_ENDING, PARSABLE_NO_ENDING
from corral.slurm.common.record import Record

OPTIONS = (
    Opt("all_clusters", "a"), Opt("cluster", "M", REQUIRED, aliases=("clusters",)), Opt("federation"),
    Opt("help", "h"), Opt("local"), Opt("noheader", "n"), Opt("parsable", "p"), Opt("parsable2", "P"),
    Opt("quiet", "Q"), Opt("time", "t", REQUIRED), Opt("tres", "T", REQUIRED), Opt("usage"),
    Opt("verbose", "v"), Opt("version", "V"),
)
SPEC = CommandSpec("sreport", OPTIONS, ignored={
    "all_clusters": "corral runs one cluster", "cluster": "corral runs one cluster",
    "federation": "corral runs one cluster", "local": "corral runs one cluster"})
# The reports corral has: (kind, Slurm's name, its short form).
REPORTS = (("cluster", "AccountUtilizationByUser", "aubu"), ("cluster", "Utilization", "utilization"),
           ("user", "TopUsage", "topusage"))
# -t's formats: (name, what the banner says, seconds per unit (0: none), with a percentage).
TIME_FORMATS = (("secper", "Seconds/Percentage of Total", 1, True), ("minper", "Minutes/Percentage of Total", 60, True),
                ("hourper", "Hours/Percentage of Total", 3600, True), ("seconds", "Seconds", 1, False),
                ("minutes", "Minutes", 60, False), ("hours", "Hours", 3600, False),
                ("percent", "Percentage of Total", 0, True))
KNOWN_TRES = ("cpu", "mem", "node", "billing", "gres/gpu")
USAGE = """\
sreport [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -n or --noheader: Don't print header when displaying results
     -p or --parsable: output will be '|' delimited with a '|' at the end
     -P or --parsable2: output will be '|' delimited without a '|' at the end
     -t <time_format>: Second, Minute, Hour, Percent, SecPer, MinPer, HourPer
     -T or --tres: comma separated list of TRES, or 'ALL' for all TRES
     -v or --verbose, -V or --version, -h or --help

  corral's reports:
     cluster AccountUtilizationByUser [start=] [end=] [accounts=] [users=]
     cluster Utilization [start=] [end=]
     user TopUsage [start=] [end=] [accounts=] [users=] [TopCount=] [group]
"""


class SreportOptions(Record):
    report: str = ""  # Slurm's name of the report, "" with an action
    start_text: str | None = None
    end_text: str | None = None
    accounts: tuple[str, ...] | None = None
    users: tuple[str, ...] | None = None
    top_count: int = 10
    group: bool = False
    time_format: tuple[str, str, int, bool] = TIME_FORMATS[4]
    tres: tuple[str, ...] = ("cpu",)
    noheader: bool = False
    parsable: int = NOT_PARSABLE
    action: str | None = None
    warnings: tuple[str, ...] = ()


def parse_sreport(argv: Sequence[str]) -> SreportOptions:
    line = parse_command_line(SPEC, argv)
    for action in ("help", "usage", "version"):
        if line.has(action):
            return SreportOptions(action=action)
    warnings = check_support(SPEC, line)
    parsable = NOT_PARSABLE
    for key, _ in line.options:
        if key in ("parsable", "parsable2"):
            parsable = PARSABLE_ENDING if key == "parsable" else PARSABLE_NO_ENDING
    options = SreportOptions(report=_report(line.positionals[:2]), time_format=_time_format(line.last("time")),
                             tres=_tres(line.last("tres")), noheader=line.has("noheader"), parsable=parsable,
                             warnings=tuple(warnings))
    return _conditions(options, line.positionals[2:])


def _report(words: Sequence[str]) -> str:
    if len(words) < 2:
        raise SlurmCommandError(f"sreport: error: name a report: {', '.join(f'{k} {n}' for k, n, _ in REPORTS)}\n", 1)
    kind, name = words[0].lower(), words[1].lower()
    if kind not in ("cluster", "user"):
        raise SlurmCommandError(f"sreport: error: corral has cluster and user reports, not {words[0]!r}\n", 1)
    for report_kind, report, short in REPORTS:
        if kind == report_kind and name in (report.lower(), short):
            return report
    if kind == "user" and name == "top":
        return "TopUsage"
    valid = ", ".join(f'"{n}"' for k, n, _ in REPORTS if k == kind)
    raise SlurmCommandError(f"Not valid report {words[1]}\nValid {kind} reports in corral are {valid}\n", 1)


def _time_format(text: str | None) -> tuple[str, str, int, bool]:
    if text is None:
        return TIME_FORMATS[4]
    word = text.lower()
    for entry in TIME_FORMATS:  # a prefix, of 6 letters or more for the *Per ones (sreport.c's order)
        if len(word) >= (6 if entry[0].endswith("per") else 1) and entry[0].startswith(word):
            return entry
    raise SlurmCommandError(f"sreport: error: unknown time format {text} "
                            "(SecPer, MinPer, HourPer, Seconds, Minutes, Hours, Percent)\n", 1)


def _tres(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ("cpu",)
    if text.lower() == "all":
        return KNOWN_TRES
    names = tuple(name.lower() for name in split_list(text))
    unknown = [n for n in names if n not in KNOWN_TRES]
    if not names or unknown:
        raise SlurmCommandError(f"sreport: fatal: No valid TRES given: {', '.join(unknown) or text} "
                                f"(corral counts {', '.join(KNOWN_TRES)})\n", 1)
    return tuple(dict.fromkeys(names))


def _conditions(options: SreportOptions, words: Sequence[str]) -> SreportOptions:
    """start=, end=, accounts=, users=, TopCount=, group: Slurm takes a keyword's prefix of 3+ letters."""
    values: dict[str, object] = {}
    for word in words:
        key, equals, value = word.partition("=")
        key = key.lower()
        if not equals and "group".startswith(key) and len(key) >= 3:
            values["group"] = True
        elif equals and key in ("start", "end"):
            values[f"{key}_text"] = value
        elif equals and len(key) >= 3 and "accounts".startswith(key):
            values["accounts"] = split_list(value)
        elif equals and len(key) >= 3 and "users".startswith(key):
            values["users"] = split_list(value)
        elif equals and len(key) >= 3 and "topcount".startswith(key) and options.report == "TopUsage":
            if not value.isdigit() or int(value) < 1:
                raise SlurmCommandError(f"sreport: error: TopCount wants a positive number, not {value!r}\n", 1)
            values["top_count"] = int(value)
        else:
            raise SlurmCommandError(f" Unknown condition: {word}\n Use keyword set to modify value\n", 1)
    return options.replace(**values)
