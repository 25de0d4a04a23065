"""One request costs the controller a bounded time: hostlists and arrays have Slurm's limits, checked
before anything is built."""
from __future__ import annotations

import time

import pytest

from tests.controller.conftest import T0


@pytest.fixture
def api(open_controller):
    return open_controller([])


def _reservation(nodes: str) -> dict:
    return {"name": "r", "start": T0 + 1000, "end": T0 + 2000, "nodes": nodes}


@pytest.mark.parametrize("nodes", ["n[1-1000000]", "n[1-1000]x[1-1000]"])
def test_a_huge_hostlist_is_refused_at_once(api, nodes) -> None:
    started = time.perf_counter()
    reply = api.post("/reservations", json=_reservation(nodes))
    assert time.perf_counter() - started < 1.0
    assert reply.status_code == 422
    assert reply.json()["detail"] == f"hostlist {nodes!r} names more than 65536 hosts"


def test_unknown_nodes_are_named_in_a_short_message(api) -> None:
    reply = api.post("/reservations", json=_reservation("x[1-5000]"))
    assert reply.status_code == 422
    assert reply.json()["detail"] == ("unknown node(s) x1, x2, x3, x4, x5, x6, x7, x8, x9, x10 and 4990 more")


def _array(spec: str) -> dict:
    return {"workdir": "/tmp", "user": "alice", "argv": ["true"], "gpus": 1, "array": spec}


def test_array_indices_stop_at_slurms_max_array_size(api) -> None:
    for spec in ("0-1001", "1001", "0-4000000:1000000", "0-3999999"):
        started = time.perf_counter()
        reply = api.post("/jobs", json=_array(spec))
        assert time.perf_counter() - started < 1.0
        assert reply.status_code == 422
        assert "task indices go up to 1000 (MaxArraySize=1001)" in reply.json()["detail"]
    reply = api.post("/jobs", json=_array("0-1000%8"))  # the largest
    assert reply.status_code == 201, reply.text
    assert len(reply.json()["task_ids"]) == 1001
