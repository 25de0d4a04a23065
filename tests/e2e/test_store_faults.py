"""The state-store contract against real storage faults (issue 10): a stimulus's effects are committed and
then visible and dispatched, or nothing changes and the caller hears 503; the controller says it is
unhealthy while the database cannot be written, and recovers by itself, losing nothing, once it can."""
from __future__ import annotations

import os
import threading
import time

import httpx
import pytest

from tests.e2e.faults import fill_disk, small_tmpfs, sqlite_write_lock
from tests.e2e.harness import API, Cluster, wait_for

pytestmark = pytest.mark.slow

HEALTH_PATHS = (f"{API}/health", "/health", "/readyz")


@pytest.fixture
def db_tmpfs(tmp_path):
    with small_tmpfs(tmp_path / "db") as directory:
        yield directory


def submission(cluster: Cluster, **fields) -> dict:
    return {"workdir": str(cluster.root), "user": "tester", "env": {"PATH": os.environ["PATH"]}, **fields}


def health(cluster: Cluster) -> dict[str, tuple[int, dict]]:
    replies = {path: cluster.http.get(path) for path in HEALTH_PATHS}
    return {path: (reply.status_code, reply.json()) for path, reply in replies.items()}


def assert_unhealthy(cluster: Cluster, because: str) -> None:
    for path, (status, body) in health(cluster).items():
        assert status == 503, (path, body)
        assert because in body["detail"], (path, body)


def healthy(cluster: Cluster) -> bool:
    return all(status == 200 for status, _ in health(cluster).values())


def assert_all_refused(cluster: Cluster, count: int, because: str) -> None:
    for _ in range(count):
        reply = cluster.http.post(f"{API}/jobs", json=submission(cluster, argv=["true"], gpus=1))
        assert reply.status_code == 503, reply.text
        assert because in reply.json()["detail"] and "nothing was changed" in reply.json()["detail"]


def assert_accounted(cluster: Cluster, expected: list[int]) -> None:
    """Exactly the accepted jobs exist, and each ran to COMPLETED."""
    accounting = cluster.http.get(f"{API}/accounting").json()
    assert {job["id"]: job["state"] for job in accounting} == {job_id: "COMPLETED" for job_id in expected}
    assert cluster.http.get(f"{API}/jobs").json() == []


def test_disk_full_refuses_changes_and_recovers_losing_nothing(db_tmpfs, cluster_factory) -> None:
    cluster = cluster_factory(nodes=2, gpus=4, db=f"sqlite:///{db_tmpfs / 'corral.db'}")
    exiting = [cluster.submit(argv=["sleep", "4"], gpus=1) for _ in range(2)]
    for job_id in exiting:
        cluster.wait_state(job_id, "RUNNING")
    # Due to start while the disk is full: the cycle that starts them cannot commit.
    starting = [cluster.submit(argv=["true"], gpus=1, begin_time=time.time() + 2) for _ in range(6)]
    filler = fill_disk(db_tmpfs)

    wait_for(lambda: not healthy(cluster), timeout_s=10, message="the controller to notice the full disk")
    assert_unhealthy(cluster, "database or disk is full")
    assert_all_refused(cluster, 20, "database or disk is full")
    time.sleep(4)  # the running jobs exit now; their agents' reports cannot be committed yet

    # Reads show what is committed: no refused job, and the jobs due to start are not shown running.
    jobs = {job["id"]: job["state"] for job in cluster.http.get(f"{API}/jobs").json()}
    assert jobs == {**{j: "RUNNING" for j in exiting}, **{j: "PENDING" for j in starting}}
    assert_unhealthy(cluster, "database or disk is full")

    filler.unlink()
    wait_for(lambda: healthy(cluster), timeout_s=30, message="the controller to recover")
    for job_id in exiting + starting:
        cluster.wait_state(job_id, "COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED")
    after = cluster.submit(argv=["true"], gpus=1)
    assert after == max(exiting + starting) + 1, "refused submissions took no job ids"
    cluster.wait_state(after, "COMPLETED")
    assert_accounted(cluster, exiting + starting + [after])


def test_locked_database_refuses_changes_while_reads_keep_answering(cluster_factory) -> None:
    cluster = cluster_factory(nodes=1, gpus=2)
    exiting = cluster.submit(argv=["sleep", "3"], gpus=1)
    cluster.wait_state(exiting, "RUNNING")

    with sqlite_write_lock(cluster.root / "corral.db"):
        refused: list[httpx.Response] = []

        def submit() -> None:
            with httpx.Client(base_url=cluster.url, headers=cluster.http.headers, timeout=30) as http:
                refused.append(http.post(f"{API}/jobs", json=submission(cluster, argv=["true"], gpus=1)))

        waiting = threading.Thread(target=submit)
        started = time.monotonic()
        waiting.start()
        # While that submission waits for the lock (SQLite's busy timeout, 5 s), the controller answers.
        slowest = 0.0
        while waiting.is_alive():
            began = time.monotonic()
            assert cluster.http.get(f"{API}/jobs/{exiting}").status_code == 200
            cluster.http.get("/readyz")
            slowest = max(slowest, time.monotonic() - began)
            time.sleep(0.1)
        assert time.monotonic() - started > 3, "the submission should have waited for the lock"
        assert slowest < 1.0, f"a read took {slowest:.2f} s while a commit waited for the lock"
        assert refused[0].status_code == 503, refused[0].text
        assert "database is locked" in refused[0].json()["detail"]

        assert_unhealthy(cluster, "database is locked")
        began = time.monotonic()
        assert_all_refused(cluster, 5, "database is locked")
        assert time.monotonic() - began < 2.0, "refusals while the store is down must be immediate"
        time.sleep(3)  # the running job exits meanwhile

    wait_for(lambda: healthy(cluster), timeout_s=30, message="the controller to recover")
    cluster.wait_state(exiting, "COMPLETED", "FAILED", "NODE_FAIL")
    after = cluster.submit(argv=["true"], gpus=1)
    assert after == exiting + 1, "refused submissions took no job ids"
    cluster.wait_state(after, "COMPLETED")
    assert_accounted(cluster, [exiting, after])
