"""`corral up --controllers N` as a user starts it, for the end-to-end tests: its own config dir, state dir
and consecutive free ports; stopped, and its PostgreSQL with it, however the test ends."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.cli.up_plan import GATEWAY_PORT_OFFSET
from corral.cli.up_postgres import INITDB_GLOB, postgres_data_dir
from tests.e2e.harness import free_port

POSTGRES_SCRIPT = Path(__file__).parents[2] / "src/corral/cli/postgres_server.sh"


@dataclass
class UpCluster:
    up: subprocess.Popen
    root: Path
    env: dict[str, str]
    port: int
    data_dir: Path

    def urls(self, count: int) -> list[str]:
        return [f"http://127.0.0.1:{self.port + i}" for i in range(count)]

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.port + GATEWAY_PORT_OFFSET}"


def skip_without_postgresql() -> None:
    if os.geteuid() != 0 and not __import__("glob").glob(INITDB_GLOB):
        pytest.skip("PostgreSQL is not installed and only root may install it")


@contextmanager
def corral_up(*args: str, controllers: int = 2, prefix: str = "corral-up-ha-") -> Iterator[UpCluster]:
    """`corral up --controllers N ARGS...`, once its banner says it is up."""
    skip_without_postgresql()
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)
    port = free_port()
    # The other controllers' ports, and the gateway's (GATEWAY_PORT_OFFSET past the first).
    while not free_port_after(port, max(controllers, GATEWAY_PORT_OFFSET + 1)):
        port = free_port()
    state_dir = root / "state"
    env = {**os.environ, "XDG_CONFIG_HOME": str(root / "config"), "PYTHONUNBUFFERED": "1",
           "CORRAL_SYSTEM_CLUSTER_FILE": str(root / "etc" / "cluster.json")}
    for name in ("CORRAL_URL", "CORRAL_SECRET", "CORRAL_SECRET_FILE", "CORRAL_TOKEN"):
        env.pop(name, None)
    up = subprocess.Popen([sys.executable, "-m", "corral.cli.main", "up", "--controllers", str(controllers), *args,
                           "--port", str(port), "--state-dir", str(state_dir)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    data_dir = lambda: postgres_data_dir(state_dir, port, os.geteuid(),  # noqa: E731 - once `corral up` made the id
                                         (state_dir / "cluster-id").read_text().strip())
    try:
        banner = up.stdout.readline()
        assert "is up" in banner, up.stderr.read() if up.poll() is not None else banner
        yield UpCluster(up, root, env, port, data_dir())
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        if (state_dir / "cluster-id").exists():
            subprocess.run(["bash", str(POSTGRES_SCRIPT), "stop", str(data_dir())], check=False, capture_output=True)
            shutil.rmtree(data_dir(), ignore_errors=True)
            if data_dir().parent.name.startswith("cluster-"):  # the cluster's own directory, root's
                shutil.rmtree(data_dir().parent, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def free_port_after(port: int, count: int) -> bool:
    """Whether port+1 .. port+count-1 are free too (the other controllers', the gateway's)."""
    for candidate in range(port + 1, port + count):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", candidate))
            except OSError:
                return False
    return True
