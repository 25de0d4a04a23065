"""A small GNU getopt_long: `--opt=value`, `--opt value`, `-N 2`, `-N2`, unambiguous long prefixes,
`--` to end options, and parsing that stops at the first positional (sbatch's "+" mode: what follows
the script belongs to the script).

An option outside the table is "unsupported" when it is one of `known` (it exists, e.g. in Slurm's
sbatch, but this command does not take it), else "unrecognized", with the nearest long name of the
table suggested (`--gpu-per-node`: did you mean '--gpus-per-node'?)."""
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


@dataclass(frozen=True, slots=True)
class _Table:
    options: list[Option]
    known: tuple[Option, ...]  # not taken, but not unknown either


def location(token: str, fallback: str) -> str:
    """' in #SBATCH directive line 3' for a token read from a script, else the fallback."""
    where = getattr(token, "where", None)
    return f" {where}" if where else fallback


def parse_args(tokens: Sequence[str], options: Iterable[Option], *, where: str = "",
               known: Iterable[Option] = ()) -> ParsedArgs:
    """Parse tokens against the option table; `where` names the source in messages (" on ...");
    `known`: options that exist elsewhere but not in the table, refused as unsupported."""
    table = _Table(list(options), tuple(known))
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


def _parse_long(tokens: Sequence[str], i: int, table: _Table, where: str) -> tuple[ParsedOption, int]:
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


def _parse_short(tokens: Sequence[str], i: int, table: _Table, where: str) -> tuple[ParsedOption, int]:
    token = tokens[i]
    written, attached = token[:2], token[2:]
    option = next((o for o in table.options if o.short == written[1]), None)
    if option is None:
        kind = "unsupported" if any(o.short == written[1] for o in table.known) else "unrecognized"
        raise DirectiveError(f"{kind} option '{written}'{location(token, where)}")
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


def _match_long(written: str, token: str, table: _Table, where: str) -> Option:
    name = written[2:]
    exact = [o for o in table.options if name in o.long_names]
    if exact:
        return exact[0]
    candidates = _prefixed(name, table.options)
    if len(candidates) == 1:
        return next(iter(candidates.values()))
    if not candidates:
        raise _outside_table(written, token, table, where)
    choices = ", ".join(f"--{n}" for n in sorted(candidates))
    raise DirectiveError(f"option '{written}' is ambiguous ({choices}){location(token, where)}")


def _prefixed(name: str, options: Iterable[Option]) -> dict[str, Option]:
    """The options one of whose long names starts with `name`, by canonical name."""
    return {o.name: o for o in options if name and any(n.startswith(name) for n in o.long_names)}


def _outside_table(written: str, token: str, table: _Table, where: str) -> DirectiveError:
    name = written[2:]
    known = list(_prefixed(name, table.known).values())
    if known:
        abbreviated = len(known) == 1 and name not in known[0].long_names
        full = f" (--{known[0].name})" if abbreviated else ""
        return DirectiveError(f"unsupported option '{written}'{full}{location(token, where)}")
    message = f"unrecognized option '{written}'{location(token, where)}"
    nearest = _nearest_long_name(name, table.options)
    return DirectiveError(f"{message}; did you mean '--{nearest}'?" if nearest else message)


def _nearest_long_name(name: str, options: Iterable[Option]) -> str | None:
    import difflib  # only on this error path

    names = [n for o in options for n in o.long_names]
    # 0.75: typos and slips (`gpu-per-node`, `partion`, `job_name`) pass; `bogus` -> `gpus` does not.
    found = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return found[0] if found else None
