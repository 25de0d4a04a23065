"""`corral status`: every controller's role, epoch and pid, and who leads. Against stand-ins answering as
the HA contract says (tests/ha_standin.py says why a stand-in), and against the real controller."""
from __future__ import annotations

import json
import os

import pytest

from corral.cli.status import NO_STATUS
from tests.ha_standin import ControllerStandIn, nothing_listening


@pytest.fixture
def pair():
    """A leader (epoch 3) and its standby, each naming both in its /status."""
    leader = ControllerStandIn("leader", epoch=3).start()
    standby = ControllerStandIn("standby", leader.url, epoch=3).start()
    peers = [{"url": leader.url, "role": "leader", "epoch": 3, "pid": 101, "last_seen": 1000.0},
             {"url": standby.url, "role": "standby", "epoch": 3, "pid": 102, "last_seen": 990.0}]
    leader.peers = standby.peers = peers
    yield leader, standby
    leader.stop()
    standby.stop()


def test_the_table_shows_every_controller_and_the_leader(pair, isolated, cli, monkeypatch):
    leader, standby = pair
    down = nothing_listening()
    monkeypatch.setenv("CORRAL_URL", f"{standby.url},{down},{leader.url}")
    result = cli("status")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["URL", "ROLE", "EPOCH", "PID", "LAST", "SEEN"]
    assert lines[1].split()[:4] == [standby.url, "standby", "3", str(os.getpid())]
    assert lines[2].split() == [down, "unreachable", "-", "-", "-"]
    assert lines[3].split()[:4] == [leader.url, "leader", "3", str(os.getpid())]
    assert lines[3].endswith("s ago")
    assert lines[4] == f"{down}: unreachable: Connection refused"
    assert lines[5] == f"leader: {leader.url} (epoch 3, pid {os.getpid()})"


def test_json_lists_each_controllers_role_epoch_and_pid(pair, isolated, cli, monkeypatch):
    leader, standby = pair
    down = nothing_listening()
    monkeypatch.setenv("CORRAL_URL", f"{leader.url},{down}")
    result = cli("status", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["leader"] == leader.url
    # The standby was not configured: the leader's /status named it, and it was asked too.
    assert data["controllers"] == [
        {"url": leader.url, "role": "leader", "epoch": 3, "pid": os.getpid(), "last_seen": 1000.0, "error": None,
         "reachable": True},
        {"url": down, "role": None, "epoch": None, "pid": None, "last_seen": None,
         "error": "unreachable: Connection refused", "reachable": False},
        {"url": standby.url, "role": "standby", "epoch": 3, "pid": os.getpid(), "last_seen": 990.0, "error": None,
         "reachable": True},
    ]


def test_during_an_election_no_controller_leads_and_the_exit_status_says_so(isolated, cli, monkeypatch):
    standby = ControllerStandIn("standby", None).start()
    try:
        monkeypatch.setenv("CORRAL_URL", f"{nothing_listening()},{standby.url}")
        result = cli("status")
        assert result.exit_code == 1
        assert result.stdout.splitlines()[-1] == ("no controller leads: an election may be under way (or none "
                                                  "runs); ask again shortly")
        assert json.loads(cli("status", "--json").stdout)["leader"] is None
    finally:
        standby.stop()


def test_against_the_real_controller(live, cli, monkeypatch):
    """Before the controller side of issue 13 a real controller has no /status: shown as answering without
    it. With it, it leads alone (the lead's end-to-end tests cover the roles of several)."""
    down = nothing_listening()
    monkeypatch.setenv("CORRAL_URL", f"{live.url},{down}")
    result = cli("status")
    assert "Traceback" not in result.output
    lines = result.stdout.splitlines()
    assert lines[1].startswith(live.url) and lines[2].split() == [down, "unreachable", "-", "-", "-"]
    assert f"{down}: unreachable: Connection refused" in lines
    if result.exit_code == 0:
        assert lines[-1].startswith(f"leader: {live.url} (epoch ")
    else:
        assert f"{live.url}: {NO_STATUS}" in lines
