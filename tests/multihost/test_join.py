"""A machine joins a running cluster across virtual hosts (tests/multihost) as docs/adding-a-machine.md says:
an admin makes a join token on `head`, the new host `gpu3` runs `corral agent join http://head:6817 --token
...` (its node name: its host name), then its agent with the credential that wrote, and a job runs there."""
from __future__ import annotations

import os
import subprocess

import pytest

from corral.controller import credentials as cred
from tests.e2e.harness import wait_for
from tests.multihost.cluster import BIN, MultiHostCluster
from tests.multihost.netns import VirtualNetwork, unavailable_reason

pytestmark = pytest.mark.slow


@pytest.fixture
def joining_cluster(tmp_path):
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    net = VirtualNetwork(["head", "login", "gpu3"]).create()
    cluster = MultiHostCluster(tmp_path, net, nodes=[])
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        net.destroy()


def test_a_new_host_joins_with_a_token_and_runs_a_job(joining_cluster):
    cluster = joining_cluster
    made = cluster.http.post("/api/v1/join-tokens", json={"description": "gpu3"})
    assert made.status_code == 201, made.text
    etc = cluster.root / "etc-gpu3"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    joined = subprocess.run(cluster.net.hosts["gpu3"].command([
        str(BIN / "corral"), "agent", "join", cluster.host_url, "--credential-file", str(etc / "agent.credential"),
        "--env-file", str(etc / "agent.env")]), env={**env, "CORRAL_JOIN_TOKEN": made.json()["token"]},
        capture_output=True, text=True, timeout=60)
    assert joined.returncode == 0 and "joined the cluster as node gpu3" in joined.stdout, joined.stderr
    assert "CORRAL_NODE=gpu3" in (etc / "agent.env").read_text()
    tokens = cluster.http.get("/api/v1/join-tokens").json()
    assert (tokens[0]["used_by"], tokens[0]["used_from"]) == ("gpu3", cluster.net.hosts["gpu3"].address)

    cluster.agents["gpu3"] = cluster._spawn_on("gpu3", [
        "-m", "corral.agent", "--controller", cluster.host_url, "--secret-file", str(etc / "agent.credential"),
        "--node", "gpu3", "--gpus", "1", "--cpus", "4", "--mem-mib", "4000", "--kill-tasks-on-exit",
        "--allow-root-jobs", "--spool", str(cluster.root / "spool-gpu3")], "agent-gpu3.log")
    wait_for(lambda: any(n["name"] == "gpu3" and n["state"] != "down" for n in cluster.nodes()),
             message="gpu3's agent registered")
    assert (etc / "agent.credential").read_text().strip() == cred.issue_agent(
        cred.signing_key(cluster.credentials.value), "gpu3")
    job_id = cluster.sbatch("#!/bin/sh\n#SBATCH -o where.out -t 5\nhostname\n")
    assert cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=60)["state"] == "COMPLETED", cluster.logs()
    assert (cluster.root / "where.out").read_text().strip() == "gpu3"
