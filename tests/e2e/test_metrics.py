"""Issue 14's check of /metrics: during a run on a real controller and agents, a scrape parsed as Prometheus
parses it counts the jobs per state that the job list (squeue) shows and the GPUs the node list (sinfo)
shows; starts and requeues are counted once each."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import API, wait_for

pytestmark = pytest.mark.slow


def scrape(cluster) -> dict[str, dict[tuple, float]]:
    reply = cluster.http.get("/metrics")
    assert reply.status_code == 200, reply.text
    found: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(reply.text):
        for s in family.samples:
            found.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return found


def test_a_scrape_matches_the_job_and_node_lists(cluster) -> None:
    big = cluster.submit(argv=["sleep", "60"], gpus=4)
    small = cluster.submit(argv=["sleep", "60"], gpus=2)
    quick = cluster.submit(argv=["true"], gpus=1)
    cluster.wait_state(quick, "COMPLETED")
    cluster.wait_state(big, "RUNNING")
    cluster.wait_state(small, "RUNNING")
    assert cluster.http.post(f"{API}/jobs/{small}/requeue").status_code == 200
    wait_for(lambda: cluster.job(small)["state"] == "RUNNING" and cluster.job(small)["restart_count"] == 1,
             message="the requeued job running again")
    waiting = cluster.submit(argv=["true"], gpus=4)  # 2 GPUs free: it waits
    assert cluster.http.post(f"{API}/nodes/node2", json={"drain": True, "reason": "repair"}).status_code == 200
    cluster.wait_state(waiting, "PENDING")

    found = scrape(cluster)
    jobs = cluster.http.get(f"{API}/jobs").json()
    nodes = cluster.http.get(f"{API}/nodes").json()

    listed: dict[tuple, float] = {}
    for row in jobs:
        key = (("account", row["account"]), ("partition", row["partition"]), ("queue", row["queue"]),
               ("state", row["state"]))
        listed[key] = listed.get(key, 0) + 1
    assert found["corral_jobs"] == listed
    assert found["slurm_jobs_running"][()] == sum(row["state"] == "RUNNING" for row in jobs) == 2
    assert found["slurm_jobs_pending"][()] == sum(row["state"] == "PENDING" for row in jobs) == 1
    for row in nodes:
        name = row["name"]
        assert found["slurm_node_gpus_alloc"][(("node", name),)] == row["gpus_alloc"]
        assert found["slurm_node_gpus"][(("node", name),)] == len(row["gpus"])
        by_state = {labels[2][1]: n for labels, n in found["corral_gpus"].items() if labels[1] == ("node", name)}
        free = "drained" if row["state"] in ("drained", "draining") else "idle"
        want = {"allocated": row["gpus_alloc"], free: len(row["gpus"]) - row["gpus_alloc"]}
        assert by_state == {k: v for k, v in want.items() if v}, (name, row["state"])
    states = [row["state"] for row in nodes]
    assert found["slurm_nodes_drained"][()] + found["slurm_nodes_draining"][()] == 1 == found["slurm_nodes_drain"][()]
    assert found["slurm_nodes_mixed"][()] + found["slurm_nodes_alloc"][()] == states.count("mixed") + \
        states.count("allocated")
    assert sum(found["corral_jobs_started_total"].values()) == 4  # big, small twice, quick
    assert found["corral_jobs_requeued_total"] == {
        (("cause", "requeue-requested"), ("partition", "gpu"), ("queue", "")): 1}
    assert found["corral_scheduler_cycle_duration_seconds_count"][()] >= 4
    route = (("method", "POST"), ("route", "/api/v1/jobs/{job_id}/requeue"), ("status", "200"))
    assert found["corral_http_request_duration_seconds_count"][route] == 1
    assert found["corral_controller_leader"][()] == 1
