"""`corral up --controllers 2` for real: a PostgreSQL server started by the project's script, two
controllers sharing it, the agents and cluster.json knowing both URLs, `corral status` and sbatch working
through the URL list, and everything (PostgreSQL included) stopped with the cluster.

Until the controller side of issue 13 is merged the controllers do not take --advertise-url; the test
says so and skips (each controller then runs standalone, which is all the client side needs)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from corral.cli.up_postgres import INITDB_GLOB, postgres_data_dir
from tests.e2e.harness import free_port, wait_for
from tests.slurm.commands import script

pytestmark = pytest.mark.slow


def _controller_takes_advertise_url() -> bool:
    help_text = subprocess.run([sys.executable, "-m", "corral.controller", "--help"], capture_output=True,
                               text=True, check=False).stdout
    return "--advertise-url" in help_text


def test_two_controllers_with_their_postgresql_start_serve_and_stop():
    if not _controller_takes_advertise_url():
        pytest.skip("the controller has no --advertise-url yet (the controller side of issue 13, branch ha-ctl)")
    if os.geteuid() != 0 and not __import__("glob").glob(INITDB_GLOB):
        pytest.skip("PostgreSQL is not installed and only root may install it")
    root = Path(tempfile.mkdtemp(prefix="corral-up-ha-"))
    root.chmod(0o755)
    port = free_port()
    while not free_port_after(port, 2):
        port = free_port()
    state_dir = root / "state"
    env = {**os.environ, "XDG_CONFIG_HOME": str(root / "config"), "PYTHONUNBUFFERED": "1",
           "CORRAL_SYSTEM_CLUSTER_FILE": str(root / "etc" / "cluster.json")}
    for name in ("CORRAL_URL", "CORRAL_SECRET", "CORRAL_SECRET_FILE", "CORRAL_TOKEN"):
        env.pop(name, None)
    up = subprocess.Popen([sys.executable, "-m", "corral.cli.main", "up", "--controllers", "2", "--nodes", "1",
                           "--gpus-per-node", "1", "--port", str(port), "--state-dir", str(state_dir)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    data_dir = postgres_data_dir(state_dir, port, os.geteuid())
    urls = [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"]
    try:
        banner = up.stdout.readline()
        assert "is up" in banner, up.stderr.read() if up.poll() is not None else banner
        assert f"API:       {', '.join(urls)}" in up.stdout.readline()
        cluster = json.loads((root / "config" / "corral" / "cluster.json").read_text())
        assert (cluster["url"], cluster["urls"]) == (urls[0], urls)

        status = subprocess.run([sys.executable, "-m", "corral.cli.main", "status", "--json"], env=env,
                                capture_output=True, text=True, timeout=60)
        described = json.loads(status.stdout)
        assert [c["url"] for c in described["controllers"]][:2] == urls, status.stderr
        assert described["leader"] in urls and status.returncode == 0

        work = root / "work"
        work.mkdir()
        work.chmod(0o777)
        sbatch = subprocess.run([str(script("sbatch")), "--parsable", "-D", str(work), "--wrap", "echo hello"],
                                env=env, capture_output=True, text=True, timeout=60)
        assert sbatch.returncode == 0, sbatch.stderr
        output = work / f"slurm-{int(sbatch.stdout)}.out"
        wait_for(lambda: output.exists() and output.read_text() == "hello\n", timeout_s=60,
                 message="the job ran")

        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=120) == 0, up.stderr.read()
        assert not (data_dir / "postmaster.pid").exists(), "PostgreSQL stopped with the cluster"
        assert (data_dir / "PG_VERSION").exists(), "its data stays for the next 'corral up'"
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        subprocess.run(["bash", str(Path(__file__).parents[2] / "src/corral/cli/postgres_server.sh"), "stop",
                        str(data_dir)], check=False, capture_output=True)
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def free_port_after(port: int, count: int) -> bool:
    """Whether port+1 .. port+count-1 are free too (the other controllers')."""
    import socket

    for candidate in range(port + 1, port + count):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", candidate))
            except OSError:
                return False
    return True
