"""Node names at registration: only names that hostlists carry unchanged (corral.hostlist)."""
from __future__ import annotations

import pytest

from tests.controller.live import live_controller


@pytest.mark.parametrize("name", ["a,b", "node[1-2]", "node 1", "gpu\u0663"])
def test_registration_refuses_names_hostlists_would_misread(tmp_path, name):
    with live_controller(tmp_path) as live:
        reply = live.http.post("/agents/register", json={"node": name, "address": "127.0.0.1", "gpus": [],
                                                         "cpus": 1, "mem_mib": 1000})
        assert reply.status_code == 422, reply.text
        assert f"invalid node name {name!r}" in reply.json()["detail"]
        assert [n["name"] for n in live.http.get("/nodes").json()] == ["node1"]
