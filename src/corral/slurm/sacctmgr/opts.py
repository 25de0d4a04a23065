"""sacctmgr's command line (sacctmgr/sacctmgr.c, 22.05), read-only: `show|list` of associations,
QOS, accounts and users with format= and conditions. Writes answer with an error naming `corral
tenancy apply`, which owns the tenancy document."""
from __future__ import annotations

from _collections_abc import Sequence

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import Opt
from corral.slurm.common.optable import CommandSpec, check_support, parse_command_line, split_list
from corral.slurm.common.printfields import NOT_PARSABLE, PARSABLE_ENDING, PARSABLE_NO_ENDING
from corral.slurm.common.record import Record

OPTIONS = (
    Opt("associations", "s"), Opt("help", "h"), Opt("immediate", "i"), Opt("noheader", "n"),
    Opt("parsable", "p"), Opt("parsable2", "P"), Opt("quiet", "Q"), Opt("readonly", "r"), Opt("usage"),
    Opt("verbose", "v"), Opt("version", "V"),
)
SPEC = CommandSpec("sacctmgr", OPTIONS, ignored={"immediate": "corral's sacctmgr only reads",
                                                 "readonly": "corral's sacctmgr only reads"})
ENTITIES = {"association": "assoc", "associations": "assoc", "assoc": "assoc", "qos": "qos", "account": "account",
            "accounts": "account", "user": "user", "users": "user"}
WRITES = frozenset({"add", "create", "modify", "update", "delete", "remove", "archive", "load", "dump",
                    "reconfigure", "shutdown", "clear"})
USAGE = """\
sacctmgr [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -n or --noheader: Don't print header when displaying results
     -p or --parsable: output will be '|' delimited with a '|' at the end
     -P or --parsable2: output will be '|' delimited without a '|' at the end
     -s or --associations: show the associations with accounts and users (`withassoc`)
     -h or --help, -V or --version, -v or --verbose

  corral's sacctmgr reads; `corral tenancy apply FILE` writes accounts, users, QOS and limits.
     show|list association [format=] [tree] [accounts=] [users=]
     show|list qos [format=] [names=]
     show|list account [format=] [names=]
     show|list user [format=] [names=]
"""
# Conditions each entity takes, by the name sacctmgr gives them (after `where`, or without it).
CONDITIONS = {"assoc": ("accounts", "users"), "qos": ("names",), "account": ("names", "accounts"),
              "user": ("names", "users")}


class SacctmgrOptions(Record):
    entity: str = ""  # "assoc", "qos", "account" or "user"
    format: str | None = None
    tree: bool = False
    names: tuple[str, ...] | None = None  # the qos/account/user names asked for
    accounts: tuple[str, ...] | None = None
    users: tuple[str, ...] | None = None
    noheader: bool = False
    parsable: int = NOT_PARSABLE
    action: str | None = None
    warnings: tuple[str, ...] = ()


def parse_sacctmgr(argv: Sequence[str]) -> SacctmgrOptions:
    line = parse_command_line(SPEC, argv)
    for action in ("help", "usage", "version"):
        if line.has(action):
            return SacctmgrOptions(action=action)
    warnings = check_support(SPEC, line)
    if line.has("associations"):
        raise SlurmCommandError("sacctmgr: error: -s/--associations (withassoc) is not supported by corral: "
                                "use `sacctmgr show assoc`\n", 1)
    parsable = NOT_PARSABLE
    for key, _ in line.options:
        if key in ("parsable", "parsable2"):
            parsable = PARSABLE_ENDING if key == "parsable" else PARSABLE_NO_ENDING
    words = list(line.positionals)
    if not words:
        raise SlurmCommandError("sacctmgr: error: name a command: show assoc|qos|account|user\n", 1)
    command = words[0].lower()
    if command in WRITES:
        raise SlurmCommandError(
            f"sacctmgr: error: corral's sacctmgr only reads: {words[0]} is not available. Accounts, users, QOS "
            "and limits are corral's tenancy document: edit it and run `corral tenancy apply FILE` "
            "(`corral tenancy show` prints the current one)\n", 1)
    if command not in ("show", "list") or len(words) < 2 or words[1].lower() not in ENTITIES:
        raise SlurmCommandError(
            "No valid entity in list command\ncorral's sacctmgr shows \"Association\", \"QOS\", \"Account\" or "
            "\"User\"\n", 1)
    options = SacctmgrOptions(entity=ENTITIES[words[1].lower()], noheader=line.has("noheader"), parsable=parsable,
                              warnings=tuple(warnings))
    return _conditions(options, words[2:])


def _conditions(options: SacctmgrOptions, words: Sequence[str]) -> SacctmgrOptions:
    values: dict[str, object] = {}
    allowed = CONDITIONS[options.entity]
    for word in words:
        key, equals, value = word.partition("=")
        key = key.lower()
        if not equals and key in ("where", "withdeleted"):
            continue
        if not equals and key == "tree" and options.entity == "assoc":
            values["tree"] = True
        elif equals and key == "format":
            values["format"] = value
        elif equals and key.rstrip("s") in {a.rstrip("s") for a in allowed}:
            values[next(a for a in allowed if a.rstrip("s") == key.rstrip("s"))] = split_list(value)
        else:
            raise SlurmCommandError(f" Unknown condition: {word}\n Use keyword 'set' to modify value\n", 1)
    return options.replace(**values)
