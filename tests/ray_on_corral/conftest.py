import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'corral[ray]')")

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A real controller with two agents, node1 and node2 (16 CPUs and 4 GPUs each), for one module."""
    from tests.e2e.harness import Cluster

    try:
        socket.gethostbyname("node2")
    except OSError:
        pytest.skip("the test cluster's node names do not resolve here (add '127.0.0.1 node1 node2' to "
                    "/etc/hosts, as .ci/run does)")
    cluster = Cluster(tmp_path_factory.mktemp("corral-ray"), nodes=2, gpus=4).start()
    yield cluster
    cluster.kill_controller()
    cluster.stop()


@pytest.fixture
def user_env(ray_cluster, tmp_path) -> dict[str, str]:
    """A user's shell on the cluster: corral's Slurm commands, ray and python on PATH, no Slurm job."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "RAY_"))}
    env.update(CORRAL_URL=ray_cluster.url, CORRAL_SECRET_FILE=str(ray_cluster.secret_file),
               PATH=f"{BIN}:{env.get('PATH', '')}")
    return env


def run(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)


def ray_processes_under(marker: str) -> list[str]:
    """Command lines of live processes that mention `marker` (a job's Ray temp dir or port)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline and "pytest" not in cmdline:
                found.append(f"{pid}: {cmdline[:200]}")
    return found


def ray_client_env(started_stdout: str, env: dict[str, str]) -> dict[str, str]:
    """`env` with the two lines `corral ray` prints for Ray's clients (RAY_ADDRESS, and the token's
    RAY_AUTH_MODE and RAY_AUTH_TOKEN_PATH) exported."""
    added = dict(env)
    for line in started_stdout.splitlines():
        if line.startswith(("RAY_ADDRESS=", "RAY_AUTH_MODE=")):
            added.update(word.split("=", 1) for word in line.split())
    return added
