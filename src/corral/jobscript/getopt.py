"""`corral submit`'s getopt: corral.slurm.common.getopt (glibc's getopt_long, sbatch's parser) in
sbatch's "+" mode (parsing stops at the first positional: what follows the script belongs to the
script; `--` ends the options too), without flag clusters, and with corral's own messages.

An option outside the table is "unsupported" when it is one of `known` (it exists, e.g. in Slurm's
sbatch, but this command does not take it), else "unrecognized", with the nearest long name of the
table suggested (`--gpu-per-node`: did you mean '--gpus-per-node'?)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from corral.jobscript.errors import DirectiveError
from corral.slurm.common.getopt import GetoptError, Opt, ParsedArgs, ParsedOption, parse_options

__all__ = ["Opt", "ParsedArgs", "ParsedOption", "location", "parse_args"]


def location(token: str, fallback: str) -> str:
    """' in #SBATCH directive line 3' for a token read from a script, else the fallback."""
    where = getattr(token, "where", None)
    return f" {where}" if where else fallback


def parse_args(tokens: Sequence[str], options: Iterable[Opt], *, where: str = "",
               known: Iterable[Opt] = ()) -> ParsedArgs:
    """Parse tokens against the option table; `where` names the source in messages (" on ...");
    `known`: options that exist elsewhere but not in the table, refused as unsupported."""
    table = tuple(options)
    try:
        return parse_options(tokens, table, permute=False, clusters=False)
    except GetoptError as exc:
        raise _reworded(exc, table, tuple(known), where) from None


def _reworded(exc: GetoptError, table: tuple[Opt, ...], known: tuple[Opt, ...], where: str) -> DirectiveError:
    written, at = exc.written, location(exc.token, where)
    if exc.kind == "no-argument":
        return DirectiveError(f"option '{written}' takes no value{at}")
    if exc.kind == "needs-argument":
        return DirectiveError(f"option '{written}' needs a value{at}")
    if exc.kind == "ambiguous" and written != "--":  # `--=x` names no option at all
        choices = ", ".join(sorted(f"--{o.key}" for o in exc.candidates))
        return DirectiveError(f"option '{written}' is ambiguous ({choices}){at}")
    if not written.startswith("--"):
        kind = "unsupported" if any(o.short == written[1] for o in known) else "unrecognized"
        return DirectiveError(f"{kind} option '{written}'{at}")
    return _outside_table(written, at, table, known)


def _outside_table(written: str, at: str, table: tuple[Opt, ...], known: tuple[Opt, ...]) -> DirectiveError:
    name = written[2:]
    matching = [o for o in known if name and any(n.startswith(name) for n in o.longs)]
    if matching:
        abbreviated = len(matching) == 1 and name not in matching[0].longs
        full = f" (--{matching[0].key})" if abbreviated else ""
        return DirectiveError(f"unsupported option '{written}'{full}{at}")
    message = f"unrecognized option '{written}'{at}"
    nearest = _nearest_long_name(name, table)
    return DirectiveError(f"{message}; did you mean '--{nearest}'?" if nearest else message)


def _nearest_long_name(name: str, options: Iterable[Opt]) -> str | None:
    import difflib  # only on this error path

    names = [n for o in options for n in o.longs]
    # 0.75: typos and slips (`gpu-per-node`, `partion`, `job_name`) pass; `bogus` -> `gpus` does not.
    found = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return found[0] if found else None
