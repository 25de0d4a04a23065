"""A controller killed (SIGKILL) in the middle of a burst of submissions loses none it acknowledged: with
group commit a submission is answered only after the transaction holding it committed, so every id a
client heard is in the store the restarted controller reads. Real controller, real HTTP, real SQLite."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import API, Cluster

SUBMITTERS = 16


@pytest.mark.slow
def test_no_acknowledged_submission_is_lost_when_the_controller_is_killed_mid_burst(tmp_path: Path) -> None:
    # One real agent with one GPU, so that the partition has a node and submissions are taken; most stay
    # pending, some run: either way each acknowledged one is a job the store must hold.
    cluster = Cluster(tmp_path, nodes=1, gpus=1)
    cluster.start()
    acknowledged: list[int] = []
    refused = [0]
    stop = threading.Event()

    def submit_until_stopped() -> None:
        body = {"argv": ["true"], "gpus": 1, "workdir": str(tmp_path), "user": "tester", "uid": 60001}
        with httpx.Client(base_url=cluster.url, headers={"Authorization": f"Bearer {cluster.secret}"},
                          timeout=10) as http:
            while not stop.is_set():
                try:
                    reply = http.post(f"{API}/jobs", json=body)
                except httpx.TransportError:
                    refused[0] += 1  # no answer: not acknowledged (the controller is gone)
                    continue
                if reply.status_code == 201:
                    acknowledged.append(reply.json()["job_id"])

    submitters = [threading.Thread(target=submit_until_stopped) for _ in range(SUBMITTERS)]
    try:
        for thread in submitters:
            thread.start()
        deadline = time.monotonic() + 60
        while len(acknowledged) < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(acknowledged) >= 300, "the burst never got going"
        cluster.kill_controller()  # mid-burst: requests in flight, some folded in, not yet committed
        time.sleep(0.5)
        stop.set()
        for thread in submitters:
            thread.join(30)
        assert refused[0] > 0, "the kill did not land mid-burst (no submission went unanswered)"
        heard = sorted(acknowledged)
        cluster.start_controller()
        found: set[int] = set()
        for i in range(0, len(heard), 500):
            reply = cluster.http.get(f"{API}/accounting", params={"ids": ",".join(map(str, heard[i:i + 500]))})
            assert reply.status_code == 200, reply.text
            found.update(job["id"] for job in reply.json())
        for job in cluster.http.get(f"{API}/jobs").json():
            found.add(job["id"])
        lost = [job_id for job_id in heard if job_id not in found]
        assert not lost, f"{len(lost)} of {len(heard)} acknowledged submissions lost: {lost[:20]}"
        assert len(set(heard)) == len(heard), "an id was given twice"
    finally:
        stop.set()
        cluster.stop()
