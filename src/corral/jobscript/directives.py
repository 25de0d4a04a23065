"""Reading `#SBATCH` (and `#CORRAL`) directives out of a batch script, as sbatch does.

Directives are read from the top of the script, after the `#!` line, up to the first line that is
neither blank nor a comment; later `#SBATCH` lines are plain comments. A directive prefix must start
the line and be followed by white space; `# SBATCH` and indented `#SBATCH` are comments, as in Slurm.
"""
from __future__ import annotations

import re
import shlex

from corral.jobscript.errors import DirectiveError

DIRECTIVE_PREFIXES = ("#SBATCH", "#CORRAL")
_DIRECTIVE = re.compile(r"(#SBATCH|#CORRAL)(?:\s+(.*))?")
WRAP_HEADER = "# This script was created by corral submit --wrap."


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
        match = _DIRECTIVE.fullmatch(line.rstrip())
        if match:
            prefix, rest = match.group(1), match.group(2) or ""
            tokens.extend(DirectiveToken(t, number, prefix) for t in _split_line(rest, number, prefix))
            continue
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break  # the first command ends the directives
    return tokens


def _split_line(text: str, line_number: int, prefix: str) -> list[str]:
    try:
        return shlex.split(text[: _comment_start(text)])
    except ValueError as exc:  # unbalanced quotes
        raise DirectiveError(f"cannot parse {prefix} directive line {line_number}: {exc}") from None


def _comment_start(text: str) -> int:
    """Index of a `#` that starts a word outside quotes (a trailing comment), else len(text).

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
            return index
        else:
            word_start = False
    return len(text)


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
