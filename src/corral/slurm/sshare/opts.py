"""sshare's command line (sshare/sshare.c, 22.05) -> SshareOptions."""
from __future__ import annotations

from _collections_abc import Sequence

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import REQUIRED, Opt
from corral.slurm.common.optable import CommandSpec, check_support, parse_command_line, split_list
from corral.slurm.common.printfields import NOT_PARSABLE, PARSABLE_ENDING, PARSABLE_NO_ENDING
from corral.slurm.common.record import Record

OPTIONS = (
    Opt("accounts", "A", REQUIRED), Opt("all", "a"), Opt("helpformat", "e"), Opt("long", "l"),
    Opt("partition", "m"), Opt("cluster", "M", REQUIRED, aliases=("clusters",)), Opt("noheader", "n"),
    Opt("format", "o", REQUIRED), Opt("parsable", "p"), Opt("parsable2", "P"), Opt("users", "u", REQUIRED),
    Opt("Users", "U"), Opt("verbose", "v"), Opt("version", "V"), Opt("help", "h"), Opt("usage"),
)
SPEC = CommandSpec("sshare", OPTIONS, ignored={"cluster": "corral runs one cluster",
                                               "partition": "corral's fair share is not per partition"})
USAGE = """\
Usage: sshare [OPTION]
  Valid OPTIONs are:
    -a or --all              list all users
    -A or --accounts=        display specific accounts (comma separated list)
    -e or --helpformat       Print a list of fields that can be specified
                             with the '--format' option
    -l or --long             include normalized usage in output
    -m or --partition        print the partition part of the association
    -M or --cluster=name     cluster to issue commands to.
    -n or --noheader         omit header from output
    -o or --format=          Comma separated list of fields. (use
                             (\"--helpformat\" for a list of available fields).
    -p or --parsable         '|' delimited output with a trailing '|'
    -P or --parsable2        '|' delimited output without a trailing '|'
    -u or --users=           display specific users (comma separated list)
    -U or --Users            display only user information
    -v or --verbose          display more information
    -V or --version          display tool version number
          --help             display this usage description
          --usage            display this usage description
"""


class SshareOptions(Record):
    accounts: tuple[str, ...] | None = None
    users: tuple[str, ...] | None = None  # None: the caller alone, unless all_users
    all_users: bool = False
    users_only: bool = False
    long: bool = False
    noheader: bool = False
    parsable: int = NOT_PARSABLE
    format: str | None = None
    action: str | None = None  # "help", "usage", "version" or "helpformat"
    warnings: tuple[str, ...] = ()


def parse_sshare(argv: Sequence[str]) -> SshareOptions:
    line = parse_command_line(SPEC, argv)
    for action in ("help", "usage", "version", "helpformat"):
        if line.has(action):
            return SshareOptions(action=action)
    if line.positionals:
        raise SlurmCommandError(f"sshare: error: Unknown arguments: {' '.join(line.positionals)}\n", 1)
    warnings = check_support(SPEC, line)
    parsable = NOT_PARSABLE
    for key, _ in line.options:  # the last of -p and -P wins, as in sshare.c
        if key in ("parsable", "parsable2"):
            parsable = PARSABLE_ENDING if key == "parsable" else PARSABLE_NO_ENDING
    accounts, users = line.last("accounts"), line.last("users")
    return SshareOptions(
        accounts=split_list(accounts) if accounts is not None else None,
        users=split_list(users) if users is not None else None, all_users=line.has("all"),
        users_only=line.has("Users"), long=line.has("long"), noheader=line.has("noheader"), parsable=parsable,
        format=line.last("format"), warnings=tuple(warnings),
    )
