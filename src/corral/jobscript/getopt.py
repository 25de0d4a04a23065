"""A small GNU getopt_long: `--opt=value`, `--opt value`, `-N 2`, `-N2`, unambiguous long prefixes,
`--` to end options, and parsing that stops at the first positional (sbatch's "+" mode: what follows
the script belongs to the script)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from corral.jobscript.errors import DirectiveError


@dataclass(frozen=True, slots=True)
class Option:
    name: str  # canonical long name, without dashes
    short: str | None = None
    aliases: tuple[str, ...] = ()
    takes_value: bool = True

    @property
    def long_names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


@dataclass(frozen=True, slots=True)
class ParsedOption:
    option: Option
    written: str  # the option as the user wrote it ("-N", "--nod"), for messages
    value: str | None
    token: str  # the token it came from (carries its script line when read from a directive)

    @property
    def label(self) -> str:
        """How to name the option in a message: as written, plus the full name if abbreviated."""
        canonical = f"--{self.option.name}"
        return self.written if self.written == canonical else f"{self.written} ({canonical})"


@dataclass(frozen=True, slots=True)
class ParsedArgs:
    options: list[ParsedOption]
    positionals: list[str]  # from the first non-option (or after `--`) to the end
    double_dash: str | None = None  # the `--` token that ended the options, if one did

    @property
    def saw_double_dash(self) -> bool:
        """`--` ended the options: the positionals are a command, not a script."""
        return self.double_dash is not None


def location(token: str, fallback: str) -> str:
    """' in #SBATCH directive line 3' for a token read from a script, else the fallback."""
    where = getattr(token, "where", None)
    return f" {where}" if where else fallback


def parse_args(tokens: Sequence[str], options: Iterable[Option], *, where: str = "") -> ParsedArgs:
    """Parse tokens against the option table; `where` names the source in messages (" on ...")."""
    table = list(options)
    parsed: list[ParsedOption] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            return ParsedArgs(parsed, list(tokens[i + 1 :]), token)
        if not token.startswith("-") or token == "-":
            return ParsedArgs(parsed, list(tokens[i:]))
        if token.startswith("--"):
            item, i = _parse_long(tokens, i, table, where)
        else:
            item, i = _parse_short(tokens, i, table, where)
        parsed.append(item)
    return ParsedArgs(parsed, [])


def _parse_long(tokens: Sequence[str], i: int, table: list[Option], where: str) -> tuple[ParsedOption, int]:
    token = tokens[i]
    written, has_eq, inline = token.partition("=")
    option = _match_long(written, token, table, where)
    if not option.takes_value:
        if has_eq:
            raise DirectiveError(f"option '{written}' takes no value{location(token, where)}")
        return ParsedOption(option, written, None, token), i + 1
    if has_eq:
        return ParsedOption(option, written, inline, token), i + 1
    return ParsedOption(option, written, _next_value(tokens, i, written, where), token), i + 2


def _parse_short(tokens: Sequence[str], i: int, table: list[Option], where: str) -> tuple[ParsedOption, int]:
    token = tokens[i]
    written, attached = token[:2], token[2:]
    option = next((o for o in table if o.short == written[1]), None)
    if option is None:
        raise DirectiveError(f"unsupported option '{written}'{location(token, where)}")
    if not option.takes_value:
        if attached:  # no flag clusters (`-hH`): corral's short flags are few (-h, -H)
            raise DirectiveError(f"option '{written}' takes no value{location(token, where)}")
        return ParsedOption(option, written, None, token), i + 1
    if attached:
        return ParsedOption(option, written, attached, token), i + 1
    return ParsedOption(option, written, _next_value(tokens, i, written, where), token), i + 2


def _next_value(tokens: Sequence[str], i: int, written: str, where: str) -> str:
    # As in getopt, a required value is the next token whatever it looks like (`-J -x` names a job "-x").
    if i + 1 >= len(tokens):
        raise DirectiveError(f"option '{written}' needs a value{location(tokens[i], where)}")
    return tokens[i + 1]


def _match_long(written: str, token: str, table: list[Option], where: str) -> Option:
    name = written[2:]
    exact = [o for o in table if name in o.long_names]
    if exact:
        return exact[0]
    candidates = {o.name: o for o in table if name and any(n.startswith(name) for n in o.long_names)}
    if len(candidates) == 1:
        return next(iter(candidates.values()))
    if not candidates:
        raise DirectiveError(f"unsupported option '{written}'{location(token, where)}")
    choices = ", ".join(f"--{n}" for n in sorted(candidates))
    raise DirectiveError(f"option '{written}' is ambiguous ({choices}){location(token, where)}")
