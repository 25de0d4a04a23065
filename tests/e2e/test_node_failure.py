"""A node fails under a running batch job, with a real controller and agents: the agent is SIGKILLed, the
controller declares its node lost after node_timeout_s, and the job (which allows requeue, the default)
comes back RUNNING on the other node, with the same id and SLURM_RESTART_COUNT=1 in its environment."""
from __future__ import annotations

import os
import time
import uuid

import psutil
import pytest

from tests.e2e.harness import wait_for

pytestmark = pytest.mark.slow

MARKER = "CORRAL_NODE_FAILURE_TEST"


@pytest.fixture
def marker():
    marker = uuid.uuid4().hex
    yield marker
    # The killed agent's tasks outlive it (they are sessions of their own): end them.
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER) == marker:
                proc.kill()
        except psutil.Error:
            pass


def test_a_batch_job_whose_agent_is_killed_runs_again_elsewhere_with_its_restart_count(cluster_factory, tmp_path,
                                                                                        marker) -> None:
    cluster = cluster_factory(nodes=2, gpus=2, config="kill_grace_s = 1\nnode_timeout_s = 3\n")
    runs = tmp_path / "runs.txt"
    script = f'#!/bin/sh\necho "${{SLURM_RESTART_COUNT:-unset}} $SLURMD_NODENAME" >> {runs}\nexec sleep 300\n'
    job = cluster.submit(script=script, batch=True, gpus_per_node=2, env={"PATH": os.environ["PATH"], MARKER: marker})
    first = cluster.wait_state(job, "RUNNING")["nodelist"]
    other = "node2" if first == "node1" else "node1"
    wait_for(lambda: runs.exists() and runs.read_text().count("\n") == 1, message="the first run's line")

    cluster.kill_agent(first)

    def running_again() -> bool:
        record = cluster.job(job)
        return record["state"] == "RUNNING" and record["restart_count"] == 1

    wait_for(running_again, timeout_s=30, message=f"job {job} running again")
    record = cluster.job(job)
    assert record["nodelist"] == other, "not on the node that is down"
    wait_for(lambda: runs.read_text().count("\n") == 2, message="the second run's line")
    assert runs.read_text().splitlines() == [f"unset {first}", f"1 {other}"], "same job, SLURM_RESTART_COUNT=1"
    assert [(h["event"], h.get("node"), h.get("outcome")) for h in record["history"]
            if h["event"] == "node-failed"] == [("node-failed", first, "requeued")]
    assert next(h for h in record["history"] if h["event"] == "requeued")["cause"] == f"node failure {first}"


def test_the_old_run_of_a_job_whose_agent_died_is_gone_before_the_new_run_starts(cluster_factory, tmp_path,
                                                                                 marker) -> None:
    """Self-fencing (decision 0017): the dead agent's task leader freezes the task after fence_after_s (2 s of
    the 3 s node timeout), so the requeued job never runs twice at once. Each run beats into a file of its
    own every 0.1 s: the first run's last beat comes before the second run's start, and it beats no more."""
    cluster = cluster_factory(nodes=2, gpus=2, config="kill_grace_s = 1\nnode_timeout_s = 3\n")
    marks = tmp_path / "marks"
    marks.mkdir()
    script = (f'#!/bin/bash\nf={marks}/run.${{SLURM_RESTART_COUNT:-0}}\necho "start $$ $EPOCHREALTIME" > $f\n'
              f'while true; do sleep 0.1; echo "beat $EPOCHREALTIME" >> $f; done\n')
    job = cluster.submit(script=script, batch=True, gpus_per_node=2, env={"PATH": os.environ["PATH"], MARKER: marker})
    first = cluster.wait_state(job, "RUNNING")["nodelist"]
    wait_for(lambda: (marks / "run.0").exists(), message="the first run's start")
    old_pid = int((marks / "run.0").read_text().split()[1])

    cluster.kill_agent(first)  # and never started again

    wait_for(lambda: (marks / "run.1").exists() and len((marks / "run.1").read_text().split()) >= 3,
             timeout_s=30, message="the second run's start")
    new_start = float((marks / "run.1").read_text().split()[2])
    assert not psutil.pid_exists(old_pid) or psutil.Process(old_pid).status() in (
        psutil.STATUS_ZOMBIE, psutil.STATUS_STOPPED), "the first run's task is frozen (its node never came back)"
    old_last = float((marks / "run.0").read_text().split()[-1])
    assert old_last < new_start, f"the first run beat at {old_last:.3f}, after the second started at {new_start:.3f}"
    time.sleep(1.0)
    assert float((marks / "run.0").read_text().split()[-1]) == old_last, "the frozen run beat again"
    assert cluster.job(job)["nodelist"] != first
