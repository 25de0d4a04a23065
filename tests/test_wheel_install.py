"""A wheel built from this tree and installed into a fresh virtual environment carries the native task
leader (decision 0022; setup.py builds it), and it runs; an agent whose leader is missing refuses to start,
naming it, rather than failing every task. The fresh environment takes corral from the wheel and only
corral's dependencies from this one (a .pth line after its own site-packages)."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, **kwargs)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the fresh environment's python, the corral package it imports)."""
    base = tmp_path_factory.mktemp("wheel-defects")
    # Without build isolation: this environment's setuptools builds it, offline.
    built = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(ROOT),
                 "-w", str(base / "dist")], cwd=base)
    assert built.returncode == 0, built.stderr
    wheels = list((base / "dist").glob("corral-*.whl"))
    assert len(wheels) == 1 and not wheels[0].name.endswith("-none-any.whl"), \
        f"{wheels}: a wheel with a native program is tagged for its platform"
    venv = base / "venv"
    assert run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    python = venv / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"]).stdout.strip())
    installed = run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                     str(wheels[0])])
    assert installed.returncode == 0, installed.stderr
    (site / "zz-corral-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    package = Path(run([str(python), "-c", "import corral; print(corral.__file__)"], cwd=base).stdout.strip()).parent
    assert package == site / "corral", f"{package}: corral from the wheel, not this tree"
    return python, package


def test_an_installed_wheel_carries_the_task_leader_and_it_runs(installed):
    python, package = installed
    leader = package / "agent" / "corral-task-leader"
    assert leader.is_file() and os.access(leader, os.X_OK), leader
    result = run([str(leader)])
    assert result.returncode == 2 and "SPEC_FD REPLY_FD" in result.stderr, result.stderr
    # The agent's own check, in the installed package, finds it.
    found = run([str(python), "-c", "from corral.agent.__main__ import leader_program_problem as p; print(p())"],
                cwd=package.parent)
    assert found.stdout.strip() == "None", found.stderr


def test_an_agent_without_its_task_leader_refuses_to_start_and_says_how_to_get_it(installed, tmp_path):
    python, package = installed
    leader = package / "agent" / "corral-task-leader"
    hidden = leader.with_name("hidden-leader")
    secret = tmp_path / "secret"
    secret.write_text("s" * 64)
    leader.rename(hidden)
    try:
        result = run([str(python), "-m", "corral.agent", "--controller", "http://127.0.0.1:9", "--secret-file",
                      str(secret), "--node", "defects-n1", "--spool", str(tmp_path / "spool")], cwd=tmp_path)
    finally:
        hidden.rename(leader)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == (
        f"corral agent: the task leader {leader} is missing, so no task could start: in a source checkout build "
        "it with `make venv`; `pip install .` and a wheel built by `pip wheel .` carry it (building them needs a "
        "C compiler)")
    assert not (tmp_path / "spool").exists(), "nothing started before the check"
