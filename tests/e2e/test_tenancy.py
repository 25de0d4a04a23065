"""End to end: preemption with requeue under real processes, and array throttling."""
from __future__ import annotations

import time

import pytest

from tests.e2e.harness import API, wait_for

pytestmark = pytest.mark.slow

CONFIG = """
kill_grace_s = 2
node_timeout_s = 15
[[qos]]
name = "low"
grace_s = 5
[[qos]]
name = "normal"
priority = 5
[[qos]]
name = "high"
priority = 10
preempts = ["low"]
[priority]
calc_period_s = 1
"""

VICTIM = """#!/bin/sh
echo "start restart=${{SLURM_RESTART_COUNT:-none}} job=$SLURM_JOB_ID" >> {log}
if [ -n "$SLURM_RESTART_COUNT" ]; then exit 0; fi
trap 'echo "got TERM" >> {log}; exit 0' TERM
while true; do sleep 0.1; done
"""


def test_preempted_job_gets_its_signal_is_requeued_and_runs_again(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(nodes=1, gpus=2, config=CONFIG)
    log = tmp_path / "victim.log"
    victim = cluster.submit(script=VICTIM.format(log=log), qos="low", gpus=2)
    cluster.wait_state(victim, "RUNNING")
    wait_for(log.exists, message="victim started")
    urgent = cluster.submit(argv=["sleep", "1"], qos="high", gpus=2)
    cluster.wait_state(urgent, "RUNNING", "COMPLETED", timeout_s=30)
    job = cluster.wait_state(victim, "COMPLETED", timeout_s=40)
    lines = log.read_text().splitlines()
    assert lines == [f"start restart=none job={victim}", "got TERM", f"start restart=1 job={victim}"]
    assert job["restart_count"] == 1
    # (The harness's agents run in development mode: each start is noted "ran-as-agent-user" too.)
    history = [h for h in job["history"] if h["event"] != "ran-as-agent-user"]
    assert [h["event"] for h in history][:2] == ["preempted", "requeued"]
    assert history[0]["by"] == urgent and history[0]["cause"] == "priority"
    assert job["gpu_seconds"] > 0, "the preempted run stays accounted"
    assert cluster.job(urgent)["start_time"] >= history[1]["t"]


def test_array_of_100_with_throttle_never_runs_more_than_8(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(nodes=2, gpus=8)
    log = tmp_path / "spans"
    script = f"#!/bin/sh\necho \"$SLURM_JOB_ID start $(date +%s.%N)\" >> {log}\nsleep 0.3\n" \
             f"echo \"$SLURM_JOB_ID end $(date +%s.%N)\" >> {log}\n"
    reply = cluster.http.post(f"{API}/jobs", json={"workdir": str(tmp_path), "user": "tester", "script": script,
                                                   "array": "0-99%8", "gpus": 1})
    assert reply.status_code == 201, reply.text
    body = reply.json()
    assert len(body["task_ids"]) == 100 and body["job_id"] == body["task_ids"][0]
    most = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        jobs = cluster.http.get(f"{API}/jobs").json()
        running = [j for j in jobs if j["state"] in ("RUNNING", "COMPLETING")]
        most = max(most, len(running))
        assert len(running) <= 8
        if not jobs:
            break
        time.sleep(0.05)
    assert most == 8, "the throttle, not the cluster, was the limit"
    acct = cluster.http.get(f"{API}/accounting", params={"ids": ",".join(map(str, body["task_ids"]))}).json()
    assert sorted(j["array_task_id"] for j in acct) == list(range(100))
    assert {j["array_job_id"] for j in acct} == {body["job_id"]} and {j["state"] for j in acct} == {"COMPLETED"}
    events = []
    for line in log.read_text().splitlines():
        _, kind, at = line.split()
        events.append((float(at), 1 if kind == "start" else -1))
    concurrent = peak = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        concurrent += delta
        peak = max(peak, concurrent)
    assert peak <= 8
