"""Nothing dies silently (issue 21, item 3), on a real controller and agent: a running job's task leader killed
from outside, or its cgroup removed under it, is an infrastructure failure. The job is requeued (same id,
restart count up by one) with a history line naming the failure, or, with --no-requeue, ends NODE_FAIL with
the failure as its Reason; /metrics counts it (corral_infrastructure_failures_total)."""
from __future__ import annotations

import os
import shutil
import time

import psutil
import pytest

from corral.agent.task_spool import TaskSpool
from tests.e2e.harness import Cluster, wait_for
from tests.e2e.test_confinement import cgroup_root, cgroup_trees, shared_root  # noqa: F401 - fixtures
from tests.e2e.test_metrics import scrape
from tests.slurm.commands import Commands

pytestmark = pytest.mark.slow

CONFIG = "kill_grace_s = 1\nnode_timeout_s = 15\n"
LEADER_KILLED = "task leader of rank 0 killed before it recorded the task's exit"


def task_record(cluster: Cluster, job_id: int):
    """The spool's record of the job's one task on node1 (its leader's pid included)."""
    spool = TaskSpool(cluster.root / "spool" / "node1")
    found = []
    wait_for(lambda: found.extend(r for r in spool.records() if r.job_id == job_id) or found,
             message=f"job {job_id}'s task in the spool")
    return found[0]


def failures(cluster: Cluster) -> dict[tuple, float]:
    return scrape(cluster).get("corral_infrastructure_failures_total", {})


def test_a_killed_task_leader_requeues_the_job_with_a_history_line_and_counts_it(cluster_factory) -> None:
    cluster = cluster_factory(nodes=1, gpus=1, config=CONFIG)
    job = cluster.submit(argv=["sleep", "300"], gpus=1)
    cluster.wait_state(job, "RUNNING")
    record = task_record(cluster, job)
    os.kill(record.leader, 9)

    wait_for(lambda: cluster.job(job)["restart_count"] == 1 and cluster.job(job)["state"] == "RUNNING",
             timeout_s=30, message=f"job {job} running again")
    history = cluster.job(job)["history"]
    failed = next(h for h in history if h["event"] == "infrastructure-failed")
    assert {k: failed[k] for k in ("node", "kind", "reason", "outcome")} == \
        {"node": "node1", "kind": "leader-killed", "reason": LEADER_KILLED, "outcome": "requeued"}
    assert next(h for h in history if h["event"] == "requeued")["cause"] == \
        f"infrastructure failure on node1: {LEADER_KILLED}"
    assert failures(cluster) == {(("kind", "leader-killed"), ("node", "node1")): 1}
    assert not psutil.pid_exists(record.pgid) or psutil.Process(record.pgid).status() == psutil.STATUS_ZOMBIE, \
        "the first run's task died with its leader"


def test_a_job_that_may_not_be_requeued_ends_node_fail_with_the_failure_as_its_reason(cluster_factory,
                                                                                      tmp_path) -> None:
    cluster = cluster_factory(nodes=1, gpus=1, config=CONFIG)
    job = cluster.submit(argv=["sleep", "300"], gpus=1, requeue=False)
    cluster.wait_state(job, "RUNNING")
    os.kill(task_record(cluster, job).leader, 9)

    record = cluster.wait_state(job, "NODE_FAIL", "FAILED", "COMPLETED")
    assert (record["state"], record["restart_count"]) == ("NODE_FAIL", 0)
    assert record["reason"] == f"InfrastructureFailure:node1: {LEADER_KILLED}"
    assert record["history"][-1]["outcome"] == "NODE_FAIL"
    assert failures(cluster) == {(("kind", "leader-killed"), ("node", "node1")): 1}
    cmd = Commands(cluster, tmp_path)
    show = cmd("scontrol", "show", "job", str(job))
    assert show.code == 0, show
    assert f"JobState=NODE_FAIL Reason=InfrastructureFailure:node1: {LEADER_KILLED}" in show.stdout, show.stdout
    sacct = cmd("sacct", "-j", str(job), "-X", "-n", "-P", "-o", "JobID,State,Reason")
    assert sacct.stdout.splitlines() == [f"{job}|NODE_FAIL|InfrastructureFailure:node1: {LEADER_KILLED}"], sacct


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="needs root to mount cgroup2")
def test_a_cgroup_removed_under_a_job_requeues_it_with_the_reason(shared_root, cgroup_root) -> None:  # noqa: F811
    root = cgroup_root
    cluster = Cluster(shared_root, nodes=1, gpus=0, config=CONFIG,
                      agent_args=("--allow-root-jobs", "--cgroup-root", str(root))).start()
    try:
        job = cluster.submit(argv=["sleep", "300"], user="root", workdir=str(shared_root),
                             env={"PATH": os.environ["PATH"]})
        cluster.wait_state(job, "RUNNING")
        task_record(cluster, job)
        cgroup = root / f"job_{job}"
        # What another cluster's agent with the same cgroup root does to a cgroup it takes for its own leftover.
        (cgroup / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + 5
        while "populated 1" in (cgroup / "cgroup.events").read_text() and time.monotonic() < deadline:
            time.sleep(0.01)
        for tree in [root, *cgroup_trees(root.name)]:
            if (tree / cgroup.name).exists():
                (tree / cgroup.name / "batch").rmdir()
                (tree / cgroup.name).rmdir()

        wait_for(lambda: cluster.job(job)["restart_count"] == 1, timeout_s=30, message=f"job {job} requeued")
        failed = next(h for h in cluster.job(job)["history"] if h["event"] == "infrastructure-failed")
        assert (failed["kind"], failed["reason"]) == \
            ("cgroup-removed", f"cgroup {cgroup / 'batch'} removed while task 0 ran")
        assert failures(cluster) == {(("kind", "cgroup-removed"), ("node", "node1")): 1}
        cluster.http.post(f"/api/v1/jobs/{job}/cancel")
        cluster.wait_state(job, "CANCELLED")
    finally:
        cluster.stop()
