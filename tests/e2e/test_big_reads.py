"""A big read does not stop the controller: while GET /accounting reads 60,000 jobs from the database
(in a worker thread) and GET /jobs encodes 30,000 (a slice at a time), /health still answers."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from corral.engine.records import JobState
from corral.store import Store
from tests.controller.conftest import job
from tests.e2e.harness import API, Cluster

pytestmark = pytest.mark.slow

FINISHED = PENDING = 30_000


@pytest.fixture(scope="module")
def crowded(tmp_path_factory):
    root = tmp_path_factory.mktemp("crowded")
    cluster = Cluster(root, nodes=0, config="kill_grace_s = 2\nnode_timeout_s = 3600\n")
    with Store.open(cluster.db) as store:
        store.save(jobs=[job(i, JobState.COMPLETED, user=f"u{i % 7}") for i in range(1, FINISHED + 1)])
        store.save(jobs=[job(i, user=f"u{i % 7}") for i in range(FINISHED + 1, FINISHED + PENDING + 1)])
    cluster.start_controller(timeout_s=120)
    yield cluster
    cluster.kill_controller()
    cluster.stop()


def _while_reading(cluster: Cluster, path: str, params: dict) -> tuple[float, float, int]:
    """(seconds the read took, the slowest /health answer meanwhile, jobs read)."""
    done, slowest = threading.Event(), [0.0]

    def probe() -> None:
        with httpx.Client(base_url=cluster.url, timeout=120) as client:
            while not done.is_set():
                started = time.perf_counter()
                assert client.get(f"{API}/health").status_code == 200
                slowest[0] = max(slowest[0], time.perf_counter() - started)
                time.sleep(0.02)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        started = time.perf_counter()
        reply = cluster.http.get(path, params=params, timeout=300)
        took = time.perf_counter() - started
    finally:
        done.set()
        prober.join()
    assert reply.status_code == 200, reply.text
    return took, slowest[0], len(reply.json())


@pytest.mark.parametrize(("path", "params", "count"), [
    (f"{API}/accounting", {}, FINISHED + PENDING),
    (f"{API}/jobs", {}, PENDING),
])
def test_health_answers_during_a_big_read(crowded, path, params, count) -> None:
    took, slowest_health, read = _while_reading(crowded, path, params)
    assert read == count
    # A stopped event loop answers /health only once the read is done: as late as the read itself.
    assert slowest_health < max(0.5, took / 4), (took, slowest_health)
