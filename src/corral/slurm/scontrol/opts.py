"""scontrol's command line (scontrol/scontrol.c): options, then a keyword and its arguments.

Keywords and `show` entities match case-insensitive prefixes of at least a minimum length, as in
scontrol (`sho`, `hostn`, `part`); corral implements the keywords below and errors on the rest."""
from __future__ import annotations

from _collections_abc import Sequence

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import REQUIRED, Opt
from corral.slurm.common.optable import CommandSpec, check_support, parse_command_line
from corral.slurm.common.record import Record

OPTIONS = (
    Opt("all", "a"), Opt("details", "d"), Opt("federation"), Opt("future", "F"), Opt("help", "h"),
    Opt("hide"), Opt("json"), Opt("local"), Opt("cluster", "M", REQUIRED, aliases=("clusters",)),
    Opt("oneliner", "o"), Opt("quiet", "Q"), Opt("sibling"), Opt("uid", "u", REQUIRED),
    Opt("usage"), Opt("verbose", "v"), Opt("version", "V"), Opt("yaml"),
)
SPEC = CommandSpec("scontrol", OPTIONS, ignored={"cluster": "corral runs one cluster"},
                   unsupported=frozenset({"json", "yaml", "future", "uid"}))
# (keyword, shortest prefix accepted); the ones corral implements.
KEYWORDS = (("show", 3), ("requeue", 3), ("hold", 2), ("release", 3), ("update", 1), ("version", 4), ("help", 2))
SUPPORTED_KEYWORDS = frozenset(k for k, _ in KEYWORDS)
# Slurm's other keywords: recognised, so that the error says corral lacks them rather than "invalid".
SLURM_ONLY_KEYWORDS = (("abort", 5), ("cancel_reboot", 3), ("create", 2), ("delete", 3), ("errnumstr", 2),
                       ("fsdampeningfactor", 3), ("getent", 6), ("listpids", 1), ("notify", 1), ("ping", 2),
                       ("reboot_nodes", 3), ("reconfigure", 3), ("requeuehold", 8), ("resume", 3),
                       ("schedloglevel", 3), ("setdebug", 2), ("setdebugflags", 9), ("shutdown", 8),
                       ("suspend", 2), ("takeover", 2), ("token", 3), ("top", 3), ("uhold", 2),
                       ("wait_job", 2), ("write", 2))
# `show` entities, in scontrol's matching order, with their shortest prefix.
ENTITIES = (("config", 1), ("hostnames", 5), ("hostlist", 5), ("hostlistsorted", 9), ("jobs", 1),
            ("nodes", 1), ("partitions", 2), ("reservations", 1), ("reservationname", 1))
_ENTITY_ALIASES = {"reservationname": "reservations"}


class ScontrolCommand(Record):
    keyword: str | None  # None with an action
    args: tuple[str, ...] = ()
    entity: str | None = None  # for show
    one_liner: bool = False
    details: int = 0
    show_all: bool = False
    quiet: bool = False
    action: str | None = None  # "help", "usage" or "version"
    warnings: tuple[str, ...] = ()


def _match(word: str, table: Sequence[tuple[str, int]]) -> str | None:
    lowered = word.lower()
    return next((name for name, shortest in table
                 if len(lowered) >= shortest and name.startswith(lowered)), None)


def parse_scontrol(argv: Sequence[str]) -> ScontrolCommand:
    line = parse_command_line(SPEC, argv)
    warnings = tuple(check_support(SPEC, line))
    flags = {"one_liner": line.has("oneliner"), "details": line.count("details"), "show_all": line.has("all"),
             "quiet": line.has("quiet"), "warnings": warnings}
    for action in ("help", "usage", "version"):
        if line.has(action):
            return ScontrolCommand(None, action=action, **flags)
    if not line.positionals:
        raise SlurmCommandError("scontrol: error: corral's scontrol has no interactive mode: give a command\n", 1)
    word, *rest = line.positionals
    keyword = _match(word, KEYWORDS)
    if keyword is None:
        if _match(word, SLURM_ONLY_KEYWORDS):
            raise SlurmCommandError(f"scontrol: error: {word} is not supported by corral\n", 1)
        raise SlurmCommandError(f"invalid keyword: {word}\n", 1)
    if keyword != "show":
        if keyword in ("requeue", "hold", "release", "update") and not rest:
            raise SlurmCommandError(f"too few arguments for keyword:{word}\n", 1)
        return ScontrolCommand(keyword, tuple(rest), **flags)
    if not rest:
        raise SlurmCommandError(f"too few arguments for keyword:{word}\n", 1)
    entity = _match(rest[0], ENTITIES)
    if entity is None:
        raise SlurmCommandError(f"invalid entity:{rest[0]} for keyword:{word} \n", 1)
    return ScontrolCommand("show", tuple(rest[1:]), entity=_ENTITY_ALIASES.get(entity, entity), **flags)
