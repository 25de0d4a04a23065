"""sinfo's command line and environment (sinfo/opts.c) -> SinfoOptions."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.formatspec import Format
from corral.slurm.common.getopt import REQUIRED, Opt
from corral.slurm.common.hostnames import checked_option
from corral.slurm.common.optable import CommandSpec, check_support, parse_command_line, split_list
from corral.slurm.common.record import Record
from corral.slurm.sinfo import format as fmt

# In sinfo's long_options order (glibc lists `--s` as summarize, sort, states).
OPTIONS = (
    Opt("all", "a"), Opt("dead", "d"), Opt("exact", "e"), Opt("federation"), Opt("help"), Opt("hide"),
    Opt("iterate", "i", REQUIRED), Opt("json"), Opt("local"), Opt("long", "l"),
    Opt("cluster", "M", REQUIRED, aliases=("clusters",)), Opt("nodes", "n", REQUIRED), Opt("noconvert"),
    Opt("Node", "N"), Opt("noheader", "h"), Opt("format", "o", REQUIRED), Opt("Format", "O", REQUIRED),
    Opt("partition", "p", REQUIRED), Opt("responding", "r"), Opt("list-reasons", "R"), Opt("summarize", "s"),
    Opt("sort", "S", REQUIRED), Opt("states", "t", REQUIRED), Opt("reservation", "T"), Opt("usage"),
    Opt("verbose", "v"), Opt("version", "V"), Opt("yaml"),
)
SPEC = CommandSpec("sinfo", OPTIONS,
                   ignored={"sort": "sinfo lists partitions and nodes in corral's order",
                            "cluster": "corral runs one cluster"},
                   unsupported=frozenset({"Format", "json", "yaml", "reservation"}))
SUMMARIZE_FORMAT = "%9P %.5a %.10l %.16F %N"  # one space before %N in 22.05
REASONS_FORMAT = "%20E %9u %19H %N"  # sinfo -R (opts.c)
REASONS_LONG_FORMAT = "%20E %12U %19H %6t %N"  # sinfo -R -l
# Node state words sinfo -t accepts (any prefix of a compact or long name) -> corral's states.
_STATE_WORDS = (("idle", "idle"), ("mixed", "mixed"), ("mix", "mixed"), ("allocated", "allocated"),
                ("alloc", "allocated"), ("draining", "draining"), ("drng", "draining"), ("drained", "drained"),
                ("drain", "drained"), ("down", "down"), ("no_respond", "down"))
_VALID_STATES = ("unknown,down,idle,allocated,?,mixed,future,drain,drained,draining,no_respond,reserved,perfctrs,"
                 "cloud,completing,powering_down,powered_down,power_down,powering_up,fail,maint,reboot,reboot^,"
                 "unknown")


class SinfoOptions(Record):
    format: Format
    node_centric: bool = False
    widen: frozenset[str] = frozenset()  # columns sinfo sizes itself (its own default formats)
    long_banner: bool = False
    noheader: bool = False
    partitions: tuple[str, ...] | None = None
    nodes: str | None = None  # hostlist expression of -n
    states: frozenset[str] | None = None  # corral node states
    dead_only: bool = False
    list_reasons: bool = False  # -R: only nodes down, drained or draining, one line per reason
    responding_only: bool = False
    iterate_s: int | None = None
    action: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def by_state(self) -> bool:
        return fmt.shows_state(self.format)


def parse_sinfo(argv: Sequence[str], env: Mapping[str, str]) -> SinfoOptions:
    line = parse_command_line(SPEC, argv)
    for action in ("help", "usage", "version"):
        if line.has(action):
            return SinfoOptions(format=fmt.parse_format(fmt.DEFAULT_FORMAT), action=action)
    warnings = check_support(SPEC, line)
    node_centric, long_output = line.has("Node"), line.has("long")
    list_reasons = line.has("list-reasons")
    spec, widen = _format_spec(line.last("format"), env, summarize=line.has("summarize"),
                               node_centric=node_centric, long_output=long_output, list_reasons=list_reasons)
    parsed = fmt.parse_format(spec)
    iterate = line.last("iterate")
    partitions = line.last("partition") or env.get("SINFO_PARTITION")
    return SinfoOptions(
        format=parsed, node_centric=node_centric, widen=widen, long_banner=long_output or iterate is not None,
        noheader=line.has("noheader"), partitions=split_list(partitions) if partitions else None,
        nodes=checked_option("sinfo", "--nodes", line.last("nodes")), states=_states(line.last("states")),
        dead_only=line.has("dead"), list_reasons=list_reasons,
        responding_only=line.has("responding"), iterate_s=int(iterate) if iterate and iterate.isdigit() else None,
        warnings=tuple(warnings) + parsed.errors,
    )


def _format_spec(given: str | None, env: Mapping[str, str], *, summarize: bool, node_centric: bool,
                 long_output: bool, list_reasons: bool) -> tuple[str, frozenset[str]]:
    if given is not None:
        return given, frozenset()
    if list_reasons:
        return (REASONS_LONG_FORMAT if long_output else REASONS_FORMAT), frozenset()
    if summarize:
        return SUMMARIZE_FORMAT, frozenset({"PARTITION"})
    if node_centric:
        spec = fmt.NODE_LONG_FORMAT if long_output else fmt.NODE_FORMAT
        return spec, frozenset({"PARTITION", "NODELIST"})
    if "SINFO_FORMAT" in env:
        return env["SINFO_FORMAT"], frozenset()
    return (fmt.LONG_FORMAT if long_output else fmt.DEFAULT_FORMAT), frozenset({"PARTITION"})


def _states(text: str | None) -> frozenset[str] | None:
    if text is None or text.lower() == "all":
        return None
    found = set()
    for word in split_list(text.lower()):
        state = next((s for name, s in _STATE_WORDS if name.startswith(word)), None)
        if state is None:
            raise SlurmCommandError(f'sinfo: error: Bad state string: "{word}"\n'
                                    f"sinfo: error: valid states: {_VALID_STATES}\n", 1)
        found.add(state)
    return frozenset(found)
