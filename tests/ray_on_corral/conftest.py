import os
import signal
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


@pytest.fixture(scope="module")
def ray_gateway(ray_cluster, tmp_path_factory):
    """`corral gateway` on the module's cluster, learning its routes from the controller; its URL."""
    import httpx

    from tests.e2e.harness import free_port, wait_for

    port = free_port()
    log = open(tmp_path_factory.mktemp("ray-gateway") / "gateway.log", "ab")
    env = {**os.environ, "CORRAL_SECRET_FILE": str(ray_cluster.secret_file)}
    process = subprocess.Popen([sys.executable, "-m", "corral.cli.main", "gateway", "--controller", ray_cluster.url,
                                "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=2, trust_env=False).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(healthy, 30, message="gateway health")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
        log.close()


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

