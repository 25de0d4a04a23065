"""The self-fencing budget the controller gives agents (decision 0017): two thirds of node_timeout_s, in
every registration reply; none when nodes are never declared down."""
from __future__ import annotations

import math

import pytest

from corral.controller.__main__ import build_app
from corral.controller.settings import SettingsError, settings_from_dict
from corral.store import Store
from tests.cli.standin import ServerThread
from tests.controller.live import SECRET, LiveController


@pytest.mark.parametrize(("node_timeout_s", "fencing", "fence_after_s"),
                         [(30.0, True, 20.0), (3.0, True, 2.0), (math.inf, True, None), (30.0, False, None)])
def test_the_registration_reply_says_when_the_node_must_fence(tmp_path, node_timeout_s, fencing, fence_after_s):
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    config = settings_from_dict({"node_timeout_s": node_timeout_s, "self_fencing": fencing})
    with ServerThread(build_app(config, store, SECRET)) as server:
        live = LiveController(server.url, tmp_path)
        reply = live.http.post("/agents/register", json={"node": "node1", "address": "127.0.0.1", "gpus": [],
                                                         "cpus": 4, "mem_mib": 4000})
        live.http.close()
    assert reply.status_code == 200, reply.text
    assert reply.json()["fence_after_s"] == fence_after_s
    heartbeat_s = reply.json()["heartbeat_s"]
    if fence_after_s is not None:
        # A leader looks every fence_after_s / 8 (at most 1 s); the kill must be done before the timeout.
        assert node_timeout_s - fence_after_s > min(1.0, fence_after_s / 8) + 0.2
        assert fence_after_s > 2 * min(heartbeat_s, fence_after_s / 4), "a healthy agent is never fenced"


def test_self_fencing_is_true_or_false():
    with pytest.raises(SettingsError, match="self_fencing must be true or false, not 'no'"):
        settings_from_dict({"self_fencing": "no"})
