"""Aligned tables as the `corral` commands print them: plain text for pipes and scripts, state colours
(rich, imported only then) on a terminal. Free of Typer and click: the lean commands
(corral.cli.lean_commands) print through it too."""
from __future__ import annotations

import sys
from _collections_abc import Sequence

from corral.cli.render import format_columns, format_table

_STATE_STYLES = {
    "RUNNING": "green", "PENDING": "yellow", "COMPLETING": "cyan", "COMPLETED": "blue", "PREEMPTED": "magenta",
    "CANCELLED": "magenta", "FAILED": "red", "TIMEOUT": "red", "NODE_FAIL": "red", "OUT_OF_MEMORY": "red",
    "idle": "green", "mixed": "cyan", "allocated": "yellow", "draining": "magenta", "drained": "magenta",
    "down": "red", "ACTIVE": "green",
}


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset(),
                state_column: int | None = None) -> None:
    lines = format_table(headers, rows, right)
    if not sys.stdout.isatty():
        sys.stdout.write("\n".join(lines) + "\n")  # plain text for pipes and scripts: no escape codes, no wrapping
        return
    _print_styled(lines, headers, rows, state_column)


def print_columns(headers: Sequence[str], columns: Sequence[Sequence[str]], right: frozenset[int] = frozenset(),
                  state_column: int | None = None) -> None:
    """print_table of a table given a column at a time (render.queue_columns)."""
    if not sys.stdout.isatty():
        sys.stdout.write("\n".join(format_columns(headers, columns, right)) + "\n")
        return
    print_table(headers, list(zip(*columns, strict=True)), right, state_column)


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
