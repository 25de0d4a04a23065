"""glibc's getopt_long, as Slurm's commands see it, with glibc's own error messages.

corral.jobscript.getopt covers what #SBATCH lines need (required values, stopping at the script).
Slurm's other commands need more of GNU getopt, so this module handles the full set:
- options after positionals (`scancel 12 --signal USR2`), unless the table is in "+" mode (sbatch
  stops at the script, whose arguments are its own);
- optional arguments, which only attach (`-j1008`, `--jobs=1008`; `-j 1008` leaves 1008 positional);
- clustered flags (`-hl`, `-ho %i`);
- long prefixes, where several spellings of one option are not ambiguous (`--clus` for
  `--cluster`/`--clusters`) and ambiguity lists the candidates in table order, as glibc does.
Each command adds its own "Try ... --help" line and exit status to the GetoptError message.
"""
from __future__ import annotations

from _collections_abc import Iterable, Sequence

from corral.slurm.common.record import Record

NO_ARG = 0
REQUIRED = 1
OPTIONAL = 2


class Opt(Record):
    """One option. `key` names it in results and is its long name unless `long` is False."""

    key: str
    short: str | None = None
    arg: int = NO_ARG
    aliases: tuple[str, ...] = ()  # more long spellings of the same option (`--users` for `--user`)
    long: bool = True

    @property
    def longs(self) -> tuple[str, ...]:
        return (self.key, *self.aliases) if self.long else self.aliases


class GetoptError(ValueError):
    """glibc's message, prefixed with the program name, without a newline."""


class CommandLine(Record):
    options: tuple[tuple[str, str | None], ...]  # (key, value) in command-line order
    positionals: tuple[str, ...]

    def has(self, key: str) -> bool:
        return any(k == key for k, _ in self.options)

    def values(self, key: str) -> list[str | None]:
        return [v for k, v in self.options if k == key]

    def last(self, key: str, default: str | None = None) -> str | None:
        found = self.values(key)
        return found[-1] if found else default

    def count(self, key: str) -> int:
        return len(self.values(key))


def getopt_long(argv: Sequence[str], table: Iterable[Opt], prog: str, *, permute: bool = True) -> CommandLine:
    """Parse argv (without the program name). Raises GetoptError with glibc's wording."""
    table = tuple(table)
    shorts = {o.short: o for o in table if o.short}
    longs = [(name, o) for o in table for name in o.longs]
    options: list[tuple[str, str | None]] = []
    positionals: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            positionals.extend(argv[i + 1 :])
            break
        if not token.startswith("-") or token == "-":
            if not permute:
                positionals.extend(argv[i:])
                break
            positionals.append(token)
            i += 1
        elif token.startswith("--"):
            i = _take_long(argv, i, longs, prog, options)
        else:
            i = _take_shorts(argv, i, shorts, prog, options)
    return CommandLine(tuple(options), tuple(positionals))


def _take_long(argv: Sequence[str], i: int, longs: list[tuple[str, Opt]], prog: str,
               options: list[tuple[str, str | None]]) -> int:
    token = argv[i]
    name, has_value, value = token[2:].partition("=")
    option, full_name = _match_long(name, token, longs, prog)
    if option.arg == NO_ARG:
        if has_value:
            raise GetoptError(f"{prog}: option '--{full_name}' doesn't allow an argument")
        options.append((option.key, None))
        return i + 1
    if has_value or option.arg == OPTIONAL:
        options.append((option.key, value if has_value else None))
        return i + 1
    if i + 1 >= len(argv):
        raise GetoptError(f"{prog}: option '--{full_name}' requires an argument")
    options.append((option.key, argv[i + 1]))
    return i + 2


def _match_long(name: str, token: str, longs: list[tuple[str, Opt]], prog: str) -> tuple[Opt, str]:
    for long_name, option in longs:
        if long_name == name:
            return option, long_name
    matches = [(n, o) for n, o in longs if n.startswith(name)]
    if not matches:
        raise GetoptError(f"{prog}: unrecognized option '{token}'")
    first_name, first = matches[0]
    # As glibc: a later match is a rival only if it is a different option than the first one found.
    rivals = [n for n, o in matches[1:] if o.key != first.key]
    if rivals:
        listed = "".join(f" '--{n}'" for n in (first_name, *rivals))
        raise GetoptError(f"{prog}: option '{token}' is ambiguous; possibilities:{listed}")
    return first, first_name


def _take_shorts(argv: Sequence[str], i: int, shorts: dict[str, Opt], prog: str,
                 options: list[tuple[str, str | None]]) -> int:
    token = argv[i]
    for pos in range(1, len(token)):
        letter = token[pos]
        option = shorts.get(letter)
        if option is None:
            raise GetoptError(f"{prog}: invalid option -- '{letter}'")
        if option.arg == NO_ARG:
            options.append((option.key, None))
            continue
        attached = token[pos + 1 :]
        if attached or option.arg == OPTIONAL:
            options.append((option.key, attached or None))
            return i + 1
        if i + 1 >= len(argv):
            raise GetoptError(f"{prog}: option requires an argument -- '{letter}'")
        options.append((option.key, argv[i + 1]))
        return i + 2
    return i + 1
