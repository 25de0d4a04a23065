"""Reading `#SBATCH` (and `#CORRAL`) directives out of a batch script, as sbatch does.

Directives are read from the top of the script, after the `#!` line, up to the first line that is
neither blank nor a comment; later `#SBATCH` lines are plain comments. A directive prefix must start
the line and be followed by white space; `# SBATCH` and indented `#SBATCH` are comments, as in Slurm.
"""
from __future__ import annotations

from corral.jobscript.errors import DirectiveError

# No `re` or `shlex` at import: sbatch reads directives on every submission, and `re` (with enum)
# costs it ~7 ms of start-up. Lines with quotes or backslashes go through shlex (imported then).
DIRECTIVE_PREFIXES = ("#SBATCH", "#CORRAL")  # both 7 characters long (_directive_rest)
_SHELL_SPECIAL = ("'", '"', "\\")
WRAP_HEADER = "# This script was created by corral submit --wrap."


class UnmatchedQuote(DirectiveError):
    """A directive line whose quote is never closed; sbatch stops on it (`fatal`)."""

    def __init__(self, prefix: str, line_number: int, quote: str, rest: str) -> None:
        super().__init__(f"cannot parse {prefix} directive line {line_number}: unmatched {quote} in [{rest}]")
        self.line_number, self.quote, self.rest = line_number, quote, rest


class DirectiveToken(str):
    """One argument token of a directive line; it remembers where it came from for messages."""

    where: str

    def __new__(cls, text: str, line_number: int, prefix: str) -> DirectiveToken:
        token = super().__new__(cls, text)
        token.where = f"in {prefix} directive line {line_number}"
        return token


def parse_directives(script_text: str) -> list[str]:
    """The argument tokens of the script's directive lines, in order (DirectiveToken instances)."""
    tokens: list[str] = []
    for number, line in enumerate(script_text.splitlines(), start=1):
        if number == 1 and line.startswith("#!"):
            continue
        prefix, rest = _directive_rest(line.rstrip())
        if prefix:
            words = _split_line(rest, number, prefix, line[len(prefix):])
            tokens.extend(DirectiveToken(t, number, prefix) for t in words)
            continue
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break  # the first command ends the directives
    return tokens


def _directive_rest(line: str) -> tuple[str, str]:
    """(prefix, arguments) of a directive line without trailing white space, else ("", "").
    The prefix must be the whole line or be followed by white space (`#SBATCHX` is a comment)."""
    prefix, rest = line[:7], line[7:]
    if prefix not in DIRECTIVE_PREFIXES or (rest and not rest[0].isspace()):
        return "", ""
    return prefix, rest.lstrip()


def _split_line(text: str, line_number: int, prefix: str, raw: str) -> list[str]:
    """The words of a directive line's arguments; `raw` is all of the line after the prefix, which
    an unmatched quote's message shows as sbatch does."""
    comment_at, open_quote = _scan(text)
    if open_quote is not None:
        raise UnmatchedQuote(prefix, line_number, open_quote, raw)
    text = text[:comment_at]
    if not any(char in text for char in _SHELL_SPECIAL):
        # What shlex.split gives for text without quotes or escapes: words between ' \t\r\n'.
        return [word for word in text.replace("\t", " ").replace("\r", " ").replace("\n", " ").split(" ") if word]
    import shlex

    try:
        return shlex.split(text)
    except ValueError as exc:  # a trailing backslash
        raise DirectiveError(f"cannot parse {prefix} directive line {line_number}: {exc}") from None


def _scan(text: str) -> tuple[int, str | None]:
    """(index of a `#` that starts a word outside quotes (a trailing comment), else len(text);
    the quote left open at the end of the text, else None).

    shlex's own comment handling also cuts `--output=a#b` at the `#`, which sbatch does not."""
    quote: str | None = None
    escaped = False
    word_start = True
    for index, char in enumerate(text):
        if escaped:
            escaped, word_start = False, False
        elif quote:
            escaped = char == "\\" and quote == '"'
            quote = None if char == quote else quote
        elif char == "\\":
            escaped, word_start = True, False
        elif char in "'\"":
            quote, word_start = char, False
        elif char.isspace():
            word_start = True
        elif char == "#" and word_start:
            return index, None
        else:
            word_start = False
    return len(text), quote


def check_script(script_text: str) -> None:
    """Refuse what sbatch refuses: an empty script, no `#!` line, DOS line breaks."""
    if not script_text.strip():
        raise DirectiveError("the batch script is empty")
    if not script_text.startswith("#!"):
        raise DirectiveError(
            "this does not look like a batch script: the first line must start with #! followed by "
            "the path to an interpreter (e.g. #!/bin/bash); to run a command, use --wrap or '-- CMD'"
        )
    if "\r\n" in script_text:
        raise DirectiveError("the batch script has DOS line breaks (\\r\\n) instead of UNIX ones (\\n)")


def wrap_script(command: str) -> str:
    """The script for `--wrap CMD`, shaped like sbatch's."""
    return f"#!/bin/sh\n{WRAP_HEADER}\n\n{command}\n"
