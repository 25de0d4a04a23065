"""A controller paused for longer than the node timeout (SIGSTOP: as a VM migration, swap or a GC pause
would), or restarted after as long, must not declare its healthy nodes lost, and its nodes, which froze
their jobs meanwhile, thaw them (decision 0017)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from tests.e2e.harness import wait_for

pytestmark = pytest.mark.slow


def test_a_paused_controller_kills_no_healthy_job(cluster_factory) -> None:
    # Self-fencing on (the default): the nodes cannot tell the pause from a cut-off, and freeze their jobs
    # 4 s into it (decision 0017); when it resumes, the controller declares no node down (its stall is
    # discounted), the agents' contact is back and the jobs are thawed, in the run they were in.
    cluster = cluster_factory(nodes=2, gpus=2, config="kill_grace_s = 2\nnode_timeout_s = 6\n")
    jobs = [cluster.submit(argv=["sleep", "14"], gpus_per_node=1, time_limit_s=120) for _ in range(4)]
    for job_id in jobs:
        cluster.wait_state(job_id, "RUNNING")
    os.killpg(cluster.controller.pid, signal.SIGSTOP)
    try:
        time.sleep(10)  # longer than the node timeout
    finally:  # never leave a stopped controller behind, whatever interrupts the test
        os.killpg(cluster.controller.pid, signal.SIGCONT)
    finals = [cluster.wait_state(job_id, "COMPLETED", "NODE_FAIL", "FAILED", timeout_s=40) for job_id in jobs]
    assert [f["state"] for f in finals] == ["COMPLETED"] * 4, cluster.logs()
    assert [f["restart_count"] for f in finals] == [0] * 4, "none was requeued"
    assert all(node["state"] != "down" for node in cluster.nodes())
    assert "could not listen" in (cluster.root / "controller.log").read_text()


def test_a_controller_restarted_after_a_long_absence_kills_no_job(cluster_factory) -> None:
    # Down for 10 s (past the fencing at 4 s and the node timeout at 6 s): the nodes freeze their jobs; the
    # restarted controller gives every node a full node timeout to register again, the agents report the
    # jobs as running, it keeps them, and the fresh contact thaws them in the run they were in.
    cluster = cluster_factory(nodes=2, gpus=2, config="kill_grace_s = 2\nnode_timeout_s = 6\n")
    jobs = [cluster.submit(argv=["sleep", "12"], gpus_per_node=1, time_limit_s=120) for _ in range(4)]
    for job_id in jobs:
        cluster.wait_state(job_id, "RUNNING")
    cluster.kill_controller()
    time.sleep(10)
    cluster.start_controller()
    finals = [cluster.wait_state(job_id, "COMPLETED", "NODE_FAIL", "FAILED", timeout_s=40) for job_id in jobs]
    assert [f["state"] for f in finals] == ["COMPLETED"] * 4, cluster.logs()
    assert [f["restart_count"] for f in finals] == [0] * 4, "none was requeued"


def test_a_dead_agent_is_still_declared_lost(cluster_factory) -> None:
    cluster = cluster_factory(nodes=2, gpus=2, config="kill_grace_s = 2\nnode_timeout_s = 6\n")
    job_id = cluster.submit(argv=["sleep", "60"], nodes=2, gpus_per_node=1, time_limit_s=120)
    cluster.wait_state(job_id, "RUNNING")
    os.killpg(cluster.agents["node2"].pid, signal.SIGKILL)
    final = cluster.wait_state(job_id, "PENDING", timeout_s=30)
    assert final["restart_count"] == 1, "requeued, as Slurm requeues a job on a failed node"
    wait_for(lambda: {n["name"]: n["state"] for n in cluster.nodes()}["node2"] == "down", 10)
