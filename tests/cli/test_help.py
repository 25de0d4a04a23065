"""One help style for every `corral` command, `corral --version`, and shell completion."""
from __future__ import annotations

import os
import re
import subprocess
import sysconfig
from pathlib import Path

import pytest
import typer

from corral.cli.main import app

CORRAL = Path(sysconfig.get_path("scripts")) / "corral"
TYPE_METAVAR = re.compile(r"<\w[\w\[\] |]*>")  # Typer's <str>, <bool>, <int range>, <list[int]>
RAW_HELP = {("submit",), ("slurm",)}  # their help is sbatch's and each Slurm command's own


def command_paths(command=None, path=()):
    """Every command and group under `corral`, as argument tuples."""
    command = command or typer.main.get_command(app)
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from command_paths(sub, (*path, name))


TYPER_HELP = [path for path, _ in command_paths() if path not in RAW_HELP]


@pytest.mark.parametrize("path", TYPER_HELP, ids=lambda p: " ".join(("corral", *p)))
def test_help_names_values_and_describes_every_option(cli, path):
    result = cli(*path, "--help", env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith(f"Usage: corral {' '.join(path)}".replace("  ", " ").rstrip())
    assert not TYPE_METAVAR.search(text), TYPE_METAVAR.search(text).group(0)
    assert "╭" not in text and "{" not in text.splitlines()[0]  # plain layout, as corral submit --help
    command = dict(command_paths())[path]
    for param in command.params:
        assert (param.help or "").strip(), f"{' '.join(path)}: {param.opts or param.name} has no description"


def test_help_shows_what_to_give(cli):
    text = cli("queue", "--help", env={"COLUMNS": "100"}).stdout
    assert "-u, --user USER" in text and "--url URL" in text and "-n, --interval SECONDS" in text
    assert re.search(r"^  -a, --all +Finished jobs too", text, re.M)
    assert "Usage: corral cancel [OPTIONS] JOB_IDS..." in cli("cancel", "-h").stdout
    simulate = cli("simulate", "--help", env={"COLUMNS": "100"}).stdout
    assert "--trace TRACE" in simulate and "--openb-pods FILE" in simulate and "[default: 42-51]" in simulate
    assert "[[accounts]], [[users]]" in cli("tenancy", "apply", "--help").stdout  # no markup eaten


def test_version(cli):
    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout == "corral 0.1.0\n"


def test_bash_completion_completes_commands_and_options():
    # As a user types it, in bash: `--show-completion` is a flag (the word after it is ignored) and Typer
    # detects the shell among the command's ancestors (shellingham), which a test run need not have (one
    # started by a daemon has none: "Shell  not supported."). `; exit` keeps bash from exec'ing corral.
    script = subprocess.run(["bash", "-c", f"'{CORRAL}' --show-completion; exit $?"], capture_output=True,
                            text=True, timeout=60)
    assert script.returncode == 0 and "_CORRAL_COMPLETE=complete_bash" in script.stdout

    def complete(words: str) -> list[str]:
        env = {**os.environ, "_CORRAL_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
        done = subprocess.run([str(CORRAL)], env=env, capture_output=True, text=True, timeout=60)
        return done.stdout.split()

    assert complete("corral qu") == ["queue", "queues"]
    assert "--watch" in complete("corral queue --w")
    assert complete("corral simulate --trace o") == ["openb"]

