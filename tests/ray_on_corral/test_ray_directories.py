"""Two real Ray heads from `corral ray`'s node script at once, both for a job 42 (two clusters on one host
each have one): each keeps its sessions, sockets and `ray_current_cluster` in a directory of its own, and
the directory goes with its Ray. No controller: the head needs none (tests/cli/test_ray_spec.py has the
rest of the script with a stand-in `ray`)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from corral.cli.ray_spec import PORTS, ray_command
from tests.e2e.harness import wait_for
from tests.ray_on_corral.conftest import BIN, ray_processes_under

pytestmark = pytest.mark.slow


def head_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RAY_", "CORRAL_"))}
    env.update(PATH=f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}", SLURMD_NODENAME="localhost", SLURM_NODEID="0",
               SLURM_JOB_ID="42", CORRAL_SESSION_SECRET="s" * 64, TMPDIR=str(tmp_path),
               # Ray waits 60 s for a new raylet to register; two heads at once on a loaded host took longer.
               RAY_raylet_start_wait_time_s="240")
    env.update({f"CORRAL_PORT_{port.upper()}": str(agent_port()) for port in PORTS})
    return env


def agent_port() -> int:
    """A port as corral's agent picks them (agent/ports.py: bind to 0, in the kernel's ephemeral range): Ray
    refuses one in its worker ports' range, 10002-19999, which harness.free_port may give."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_directory(head: subprocess.Popen) -> Path | None:
    """The directory the head's `ray start` was given, from its command line."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == head.pid:
            given = [a.removeprefix("--temp-dir=") for a in argv if a.startswith("--temp-dir=")]
            if given:
                return Path(given[0])
    return None


def start_head(env: dict[str, str], log, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(ray_command("r", 0, 1, 100), env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_until_up(head: subprocess.Popen, log: Path) -> Path:
    """The head's directory, once its `ray_current_cluster` is written (Ray is up)."""
    directory = wait_for(lambda: ray_directory(head), 60, message="ray start")
    current = directory / "ray_current_cluster"
    wait_for(lambda: current.exists() or head.poll() is not None, 400, interval_s=0.5, message=str(current))
    assert current.exists(), log.read_text(errors="replace")[-3000:]
    return directory


@pytest.mark.timeout(900)
def test_two_ray_heads_of_the_same_job_id_keep_their_own_directories(tmp_path):
    """The second starts once the first is up (both at once doubled a start that already takes a minute on
    the loaded 2-core VM, and Ray's fixed 15 s waits then failed every attempt); both then run together."""
    envs = [head_env(tmp_path / name) for name in ("a", "b")]
    logs = [tmp_path / f"head-{name}.log" for name in ("a", "b")]
    heads: list[subprocess.Popen] = []
    directories: list[Path] = []
    try:
        for env, log in zip(envs, logs, strict=True):
            Path(env["TMPDIR"]).mkdir()
            with open(log, "wb") as out:
                heads.append(start_head(env, out, tmp_path))
            directories.append(wait_until_up(heads[-1], log))
        assert directories[0] != directories[1] and all(d.name.startswith("corral-ray-42.") for d in directories)
        for directory, env, head in zip(directories, envs, heads, strict=True):
            assert head.poll() is None, "both run"
            current = (directory / "ray_current_cluster").read_text().strip()
            assert current.endswith(f":{env['CORRAL_PORT_GCS']}"), "its own head's address, not overwritten"
            assert any((directory / "session_latest" / "sockets").iterdir()), "its sockets are there"
            assert not (Path(env["TMPDIR"]) / "ray").exists(), "nothing under Ray's default directory"
    finally:
        for head in heads:
            os.killpg(head.pid, signal.SIGTERM)
        for head in heads:
            head.wait(timeout=120)
    assert not any(d.exists() for d in directories), "each directory goes with its Ray"
    wait_for(lambda: not any(ray_processes_under(str(d)) for d in directories), 60, message="Ray processes ending")
