"""glibc's getopt_long, as Slurm's commands see it: the one option parser of corral's Slurm commands
and of `corral submit` (its #SBATCH directives too, through corral.jobscript.getopt).

It handles the GNU getopt set:
- options after positionals (`scancel 12 --signal USR2`), unless `permute` is off (sbatch and
  `corral submit` stop at the script, whose arguments are its own);
- optional arguments, which only attach (`-j1008`, `--jobs=1008`; `-j 1008` leaves 1008 positional);
- clustered flags (`-hl`, `-ho %i`), unless `clusters` is off (then `-hx` is a flag given a value);
- long prefixes, where several spellings of one option are not ambiguous (`--clus` for
  `--cluster`/`--clusters`) and ambiguity lists the candidates in table order, as glibc does.
A GetoptError carries glibc's message and what went wrong (`kind`, the token, the option as
written, the candidates), for front ends that word it their own way (corral.jobscript.getopt).
Each Slurm command adds its own "Try ... --help" line and exit status to the message.
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
    """glibc's message, prefixed with the program name, without a newline; `kind` is one of
    "unrecognized", "ambiguous", "no-argument", "needs-argument"."""

    def __init__(self, message: str, kind: str = "", token: str = "", written: str = "",
                 candidates: tuple[Opt, ...] = ()) -> None:
        super().__init__(message)
        self.kind, self.token, self.written, self.candidates = kind, token, written, candidates


class ParsedOption(Record):
    option: Opt
    written: str  # the option as given ("-N", "--nod"), for messages
    value: str | None
    token: str  # the token it came from (carries its script line when read from a directive)

    @property
    def label(self) -> str:
        """How to name the option in a message: as written, plus the full name if abbreviated."""
        canonical = f"--{self.option.key}"
        return self.written if self.written == canonical else f"{self.written} ({canonical})"


class ParsedArgs(Record):
    options: tuple[ParsedOption, ...]  # in command-line order
    positionals: list[str]
    double_dash: str | None = None  # the `--` token that ended the options, if one did

    @property
    def saw_double_dash(self) -> bool:
        """`--` ended the options: the positionals are a command, not a script."""
        return self.double_dash is not None


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
    parsed = parse_options(argv, table, prog, permute=permute)
    return CommandLine(tuple((p.option.key, p.value) for p in parsed.options), tuple(parsed.positionals))


def parse_options(argv: Sequence[str], table: Iterable[Opt], prog: str = "", *, permute: bool = True,
                  clusters: bool = True) -> ParsedArgs:
    """Parse argv (without the program name), keeping how each option was written."""
    table = tuple(table)
    shorts = {o.short: o for o in table if o.short}
    longs = [(name, o) for o in table for name in o.longs]
    options: list[ParsedOption] = []
    positionals: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            positionals.extend(argv[i + 1 :])
            return ParsedArgs(tuple(options), positionals, token)
        if not token.startswith("-") or token == "-":
            if not permute:
                positionals.extend(argv[i:])
                break
            positionals.append(token)
            i += 1
        elif token.startswith("--"):
            i = _take_long(argv, i, longs, prog, options)
        else:
            i = _take_shorts(argv, i, shorts, prog, options, clusters)
    return ParsedArgs(tuple(options), positionals)


def _take_long(argv: Sequence[str], i: int, longs: list[tuple[str, Opt]], prog: str,
               options: list[ParsedOption]) -> int:
    token = argv[i]
    written, has_value, value = token.partition("=")
    option, full_name = _match_long(written[2:], token, longs, prog)
    if option.arg == NO_ARG:
        if has_value:
            raise GetoptError(f"{prog}: option '--{full_name}' doesn't allow an argument", "no-argument",
                              token, written, (option,))
        options.append(ParsedOption(option, written, None, token))
        return i + 1
    if has_value or option.arg == OPTIONAL:
        options.append(ParsedOption(option, written, value if has_value else None, token))
        return i + 1
    if i + 1 >= len(argv):
        raise GetoptError(f"{prog}: option '--{full_name}' requires an argument", "needs-argument",
                          token, written, (option,))
    options.append(ParsedOption(option, written, argv[i + 1], token))
    return i + 2


def _match_long(name: str, token: str, longs: list[tuple[str, Opt]], prog: str) -> tuple[Opt, str]:
    for long_name, option in longs:
        if long_name == name:
            return option, long_name
    matches = [(n, o) for n, o in longs if n.startswith(name)]
    written = token.partition("=")[0]
    if not matches:
        raise GetoptError(f"{prog}: unrecognized option '{token}'", "unrecognized", token, written)
    first_name, first = matches[0]
    # As glibc: a later match is a rival only if it is a different option than the first one found.
    rivals = [(n, o) for n, o in matches[1:] if o.key != first.key]
    if rivals:
        listed = "".join(f" '--{n}'" for n, _ in ((first_name, first), *rivals))
        candidates = tuple({o.key: o for _, o in ((first_name, first), *rivals)}.values())
        raise GetoptError(f"{prog}: option '{token}' is ambiguous; possibilities:{listed}", "ambiguous",
                          token, written, candidates)
    return first, first_name


def _take_shorts(argv: Sequence[str], i: int, shorts: dict[str, Opt], prog: str,
                 options: list[ParsedOption], clusters: bool) -> int:
    token = argv[i]
    for pos in range(1, len(token)):
        letter = token[pos]
        written = f"-{letter}"
        option = shorts.get(letter)
        if option is None:
            raise GetoptError(f"{prog}: invalid option -- '{letter}'", "unrecognized", token, written)
        attached = token[pos + 1 :]
        if option.arg == NO_ARG:
            if attached and not clusters:
                raise GetoptError(f"{prog}: option '{written}' doesn't allow an argument", "no-argument",
                                  token, written, (option,))
            options.append(ParsedOption(option, written, None, token))
            continue
        if attached or option.arg == OPTIONAL:
            options.append(ParsedOption(option, written, attached or None, token))
            return i + 1
        if i + 1 >= len(argv):
            raise GetoptError(f"{prog}: option requires an argument -- '{letter}'", "needs-argument",
                              token, written, (option,))
        options.append(ParsedOption(option, written, argv[i + 1], token))
        return i + 2
    return i + 1
