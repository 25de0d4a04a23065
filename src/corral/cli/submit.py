"""`corral submit` through the Typer app (what corral.cli.lean_commands hands on): the command line and the job
body are corral.cli.submit_line's; this adds the httpx client and Typer's printing."""
from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

import typer

from corral.cli.connect import open_client
from corral.cli.output import print_json, reported_errors
from corral.cli.submit_line import CLI_OPTIONS, USAGE, build_body, split_command_line

__all__ = ["CLI_OPTIONS", "USAGE", "build_body", "run_submit", "split_command_line"]


def run_submit(argv: Sequence[str], stdin: TextIO | None = None) -> None:
    with reported_errors():
        line = split_command_line(argv)
        if line.help:
            typer.echo(USAGE, nl=False)
            return
        body = build_body(line, stdin or sys.stdin)
        with open_client(line.url) as client:
            reply = client.submit(body)
    if line.json:
        print_json(reply)
    elif line.parsable:
        typer.echo(str(reply["job_id"]))
    else:
        typer.echo(f"Submitted job {reply['job_id']}")
