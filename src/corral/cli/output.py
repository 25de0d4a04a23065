"""Printing: errors as `corral: error: ...`, JSON, and aligned tables (corral.cli.tables)."""
from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NoReturn

import typer

from corral.cli.errors import CliError
from corral.cli.tables import print_table
from corral.jobscript.errors import DirectiveError


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


__all__ = ["fail", "warn", "reported_errors", "print_json", "print_lines", "print_table"]
