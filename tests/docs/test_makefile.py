"""The Makefile as a newcomer meets it: `make up` takes the port, nodes and GPUs, and the first run says what
it installs before the long silent pip step, or that the Python is too old."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEADER_SOURCE = "src/corral/agent/task_leader.c"


def make(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    for name in ("Makefile", "requirements.lock", "pyproject.toml", LEADER_SOURCE):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return subprocess.run(["make", "--no-print-directory", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)


def test_make_up_takes_port_nodes_and_gpus(tmp_path) -> None:
    make(tmp_path, "--version")  # copies the files
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".installed").touch()  # newer than the lock: nothing to install
    ran = make(tmp_path, "-n", "up", "PORT=7000", "NODES=3", "GPUS=8")
    assert ran.stdout.splitlines()[-1] == ".venv/bin/corral up --nodes 3 --gpus-per-node 8 --port 7000"
    assert make(tmp_path, "-n", "up").stdout.splitlines()[-1].endswith("--nodes 2 --gpus-per-node 4 --port 6817")


def test_the_first_run_says_what_it_installs_before_installing(tmp_path) -> None:
    lines = make(tmp_path, "-n", "venv").stdout.splitlines()
    announce = next(i for i, line in enumerate(lines) if "creating .venv from requirements.lock" in line)
    install = next(i for i, line in enumerate(lines) if "pip install" in line and "requirements.lock" in line)
    assert announce < install


def test_a_too_old_python_is_named(tmp_path) -> None:
    old = tmp_path / "python3.10"
    old.write_text('#!/bin/sh\n[ "$1" = "-V" ] && { echo "Python 3.10.12"; exit 0; }\nexit 1\n')
    old.chmod(0o755)
    ran = make(tmp_path, "venv", f"PYTHON={old}")
    assert ran.returncode != 0 and not (tmp_path / ".venv").exists()
    assert "corral needs Python >= 3.11" in ran.stderr and "Python 3.10.12" in ran.stderr


def test_the_native_task_leader_is_built_with_the_venv_and_before_a_cluster_starts(tmp_path) -> None:
    make(tmp_path, "--version")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".installed").touch()
    for target in ("venv", "up", "test", "bench", "chaos"):
        lines = make(tmp_path, "-n", target).stdout.splitlines()
        build = f"-o src/corral/agent/corral-task-leader {LEADER_SOURCE} -lm"
        assert any(line.startswith("cc ") and build in line for line in lines), (target, lines)
    leader = "src/corral/agent/corral-task-leader"
    built = subprocess.run(["make", leader], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    assert (tmp_path / leader).stat().st_mode & 0o111
    again = subprocess.run(["make", "-n", leader], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "cc " not in again.stdout  # built once, until its source changes
