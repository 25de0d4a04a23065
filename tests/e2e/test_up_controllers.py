"""`corral up --controllers 2` for real: a PostgreSQL server started by the project's script, two
controllers sharing it, the agents and cluster.json knowing both URLs, `corral status` and sbatch working
through the URL list, and everything (PostgreSQL included) stopped with the cluster."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tests.e2e.harness import wait_for
from tests.e2e.up_ha import corral_up
from tests.slurm.commands import script

pytestmark = pytest.mark.slow


def test_two_controllers_with_their_postgresql_start_serve_and_stop():
    with corral_up("--nodes", "1", "--gpus-per-node", "1") as cluster:
        up, env, root = cluster.up, cluster.env, cluster.root
        urls = cluster.urls(2)
        assert f"API:       {', '.join(urls)}" in up.stdout.readline()
        described_file = json.loads((root / "config" / "corral" / "cluster.json").read_text())
        assert (described_file["url"], described_file["urls"]) == (urls[0], urls)

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
        assert not (cluster.data_dir / "postmaster.pid").exists(), "PostgreSQL stopped with the cluster"
        assert (cluster.data_dir / "PG_VERSION").exists(), "its data stays for the next 'corral up'"
