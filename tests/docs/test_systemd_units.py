"""contrib/systemd: the unit files load without a warning (`systemd-analyze verify`, where installed), and
their command lines, with the example settings files' values, are ones the controller and agent accept."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corral.agent.__main__ import build_parser as agent_parser
from corral.controller.__main__ import parse_args as controller_args

UNITS = Path(__file__).resolve().parents[2] / "contrib" / "systemd"
INSTALLED_PYTHON = "/opt/corral/bin/python"  # where docs/adding-a-machine.md installs corral


def settings(name: str) -> dict[str, str]:
    """An EnvironmentFile's assignments (KEY=value lines; # starts a comment)."""
    lines = (UNITS / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def service_lines(unit: str) -> list[str]:
    """The unit's lines, continuation lines joined, comments left out."""
    text = (UNITS / unit).read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def exec_start(unit: str, env: dict[str, str]) -> list[str]:
    """ExecStart's words with ${VAR} and $VAR expanded as systemd does ($VAR splits into words)."""
    line = next(line for line in service_lines(unit) if line.startswith("ExecStart="))
    words: list[str] = []
    for word in shlex.split(line.removeprefix("ExecStart=")):
        if word.startswith("${") and word.endswith("}"):
            words.append(env[word[2:-1]])
        elif word.startswith("$"):
            words.extend(env[word[1:]].split())
        else:
            words.append(word)
    return words


def test_the_controller_unit_runs_the_controller_with_arguments_it_accepts():
    argv = exec_start("corral-controller.service", settings("controller.env"))
    assert argv[:3] == [INSTALLED_PYTHON, "-m", "corral.controller"]
    args = controller_args(argv[3:])
    assert (args.listen, args.secret_file, args.config) == ("0.0.0.0:6817", "/etc/corral/secret",
                                                            "/etc/corral/corral.toml")
    assert "Environment=CORRAL_LISTEN=0.0.0.0:6817" in service_lines("corral-controller.service")


def test_the_agent_unit_runs_the_agent_with_arguments_it_accepts():
    argv = exec_start("corral-agent.service", settings("agent.env"))
    assert argv[:3] == [INSTALLED_PYTHON, "-m", "corral.agent"]
    args = agent_parser().parse_args(argv[3:])
    assert (args.controller, args.node, args.kill_tasks_on_exit) == (("http://head:6817",), "gpu01", True)
    assert args.address is None  # the agent finds its own, towards the controller


@pytest.mark.parametrize("unit", ["corral-controller.service", "corral-agent.service"])
def test_systemd_loads_the_unit_without_a_warning(unit, tmp_path):
    verify = shutil.which("systemd-analyze")
    if verify is None:
        pytest.skip("systemd-analyze is not installed")
    # verify checks that ExecStart's program exists: point it at this Python.
    (tmp_path / unit).write_text((UNITS / unit).read_text().replace(INSTALLED_PYTHON, sys.executable))
    done = subprocess.run([verify, "verify", "--man=no", str(tmp_path / unit)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if unit in line] == [], done.stderr
