"""Printing: errors as `corral: error: ...`, JSON, and aligned tables (state colours on a terminal)."""
from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NoReturn

import typer

from corral.cli.errors import CliError
from corral.cli.render import format_table
from corral.jobscript.errors import DirectiveError

_STATE_STYLES = {
    "RUNNING": "green", "PENDING": "yellow", "COMPLETING": "cyan", "COMPLETED": "blue", "PREEMPTED": "magenta",
    "CANCELLED": "magenta", "FAILED": "red", "TIMEOUT": "red", "NODE_FAIL": "red", "OUT_OF_MEMORY": "red",
    "idle": "green", "mixed": "cyan", "allocated": "yellow", "draining": "magenta", "drained": "magenta",
    "down": "red", "ACTIVE": "green",
}


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"corral: error: {message}", err=True)
    raise typer.Exit(code)


def warn(message: str) -> None:
    typer.echo(f"corral: {message}", err=True)


@contextmanager
def reported_errors() -> Iterator[None]:
    """Turn the errors meant for users into `corral: error: <message>` and exit status 1."""
    try:
        yield
    except (CliError, DirectiveError) as exc:
        fail(str(exc))


def print_json(data: object) -> None:
    typer.echo(json.dumps(data, indent=2))


def print_lines(lines: Sequence[str]) -> None:
    typer.echo("\n".join(lines))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset(),
                state_column: int | None = None) -> None:
    lines = format_table(headers, rows, right)
    if not sys.stdout.isatty():
        print_lines(lines)  # plain text for pipes and scripts: no escape codes, no wrapping
        return
    _print_styled(lines, headers, rows, state_column)


def _print_styled(lines: list[str], headers: Sequence[str], rows: Sequence[Sequence[str]],
                  state_column: int | None) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(soft_wrap=True, highlight=False)  # soft_wrap: long lines are not folded
    widths = [max(len(c) for c in column) for column in zip(headers, *rows, strict=False)]
    start = sum(w + 2 for w in widths[: state_column or 0])
    for index, line in enumerate(lines):
        text = Text(line, style="bold" if index == 0 else "")
        if index and state_column is not None:
            state = rows[index - 1][state_column]
            text.stylize(_STATE_STYLES.get(state, ""), start, start + len(state))
        console.print(text)
