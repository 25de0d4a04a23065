"""The tenancy API over real HTTP: the tenancy document, dependencies, holds, reservations, priorities."""
from __future__ import annotations

import time

import pytest

from tests.e2e.harness import API

pytestmark = pytest.mark.slow

TENANCY = {
    "accounts": [{"name": "lab"}, {"name": "vision", "parent": "lab", "shares": 2}],
    "users": [{"name": "tester", "accounts": ["vision"]}],
    "qos": [{"name": "normal"}],
    "queues": [{"name": "vq", "accounts": ["vision"], "nominal": {"gpu": 2}}],
    "limits": [{"user": "tester", "max_submit_jobs": 50}],
}


def test_tenancy_document_quota_and_explanations(cluster) -> None:
    bad = dict(TENANCY, users=[{"name": "tester", "accounts": ["nope"]}])
    reply = cluster.http.put(f"{API}/tenancy", json=bad)
    assert reply.status_code == 422 and "unknown account 'nope'" in reply.text
    assert cluster.http.put(f"{API}/tenancy", json=TENANCY).status_code == 200
    assert cluster.http.get(f"{API}/tenancy").json()["queues"][0]["name"] == "vq"
    reply = cluster.http.post(f"{API}/jobs", json={"workdir": "/tmp", "user": "stranger", "argv": ["true"]})
    assert reply.status_code == 422 and "no association" in reply.json()["detail"]
    first = cluster.submit(argv=["sleep", "30"], gpus=2)
    second = cluster.submit(argv=["true"], gpus=1)
    cluster.wait_state(first, "RUNNING")
    job = cluster.wait_state(second, "PENDING")
    deadline = time.monotonic() + 10
    while job["reason"] != "QueueQuota" and time.monotonic() < deadline:
        job = cluster.job(second)
    assert job["reason"] == "QueueQuota" and "nominal quota 2" in job["reason_detail"]
    assert job["account"] == "vision" and job["queue"] == "vq" and job["position"] == 1
    queues = cluster.http.get(f"{API}/queues").json()
    assert queues == [{"name": "vq", "cohort": None, "nominal": {"gpu": 2}, "usage": {"gpu": 2},
                       "borrowing": False, "pending_jobs": 1, "running_jobs": 1}]
    prio = cluster.http.get(f"{API}/priority").json()
    assert [p["job_id"] for p in prio] == [second] and prio[0]["fairshare"] > 0
    shares = {row["account"]: row for row in cluster.http.get(f"{API}/fairshare").json()}
    assert shares["vision"]["raw_usage"] > 0
    cluster.http.post(f"{API}/jobs/{first}/cancel")
    cluster.wait_state(second, "COMPLETED")


def test_dependency_hold_and_release(cluster) -> None:
    first = cluster.submit(argv=["sleep", "1"], gpus=1)
    after = cluster.submit(argv=["true"], gpus=1, dependency=f"afterok:{first}")
    held = cluster.submit(argv=["true"], gpus=1, hold=True)
    assert cluster.wait_state(after, "PENDING")["dependency"] == f"afterok:{first}"
    cluster.wait_state(after, "COMPLETED")
    assert cluster.job(after)["start_time"] >= cluster.job(first)["end_time"]
    assert cluster.job(held)["reason"] == "JobHeldUser"
    assert cluster.http.post(f"{API}/jobs/{held}/release").status_code == 200
    cluster.wait_state(held, "COMPLETED")
    reply = cluster.http.post(f"{API}/jobs", json={"workdir": "/tmp", "user": "t", "argv": ["true"],
                                                   "dependency": "afterok:99999"})
    assert reply.status_code == 422 and "does not exist" in reply.json()["detail"]


def test_reservations_keep_others_off_their_nodes(cluster) -> None:
    now = time.time()
    spec = {"name": "maint", "start": now - 1, "end": now + 600, "nodes": "node1", "maintenance": True}
    reply = cluster.http.post(f"{API}/reservations", json=spec)
    assert reply.status_code == 201 and reply.json()["active"] is True
    assert cluster.http.post(f"{API}/reservations", json=spec).status_code == 409
    jobs = [cluster.submit(argv=["sleep", "2"], gpus=4, time_limit_s=60) for _ in range(2)]
    first = cluster.wait_state(jobs[0], "RUNNING")
    assert first["nodelist"] == "node2"
    assert cluster.job(jobs[1])["state"] == "PENDING", "node1 is under maintenance"
    assert cluster.http.delete(f"{API}/reservations/maint").status_code == 204
    cluster.wait_state(jobs[1], "RUNNING", "COMPLETED")
