"""The `corral` CLI and SDK client (httpx) follow the leader of several controllers (issue 13), against
stand-ins that answer as a leader or a standby does under the HA contract (tests/ha_standin.py says why a
stand-in; the end-to-end tests against real controllers come with the controller side)."""
from __future__ import annotations

import time

import pytest

from corral.cli.client import Client, ClientError, ControllerUnreachable
from tests.ha_standin import nothing_listening

JOB = {"workdir": "/", "user": "u", "argv": ["true"]}


def test_a_standby_sends_the_request_to_the_leader_it_names_and_the_leader_is_remembered(standins):
    leader = standins()
    standby = standins("standby", leader.url)
    with Client([standby.url, leader.url]) as client:
        assert client.submit(JOB)["job_id"] == 1
        assert client.url == leader.url
        assert client.nodes() == []
    assert standby.requests == [("POST", "/api/v1/jobs")]
    assert leader.requests == [("POST", "/api/v1/jobs"), ("GET", "/api/v1/nodes")]


def test_the_leader_named_in_the_body_is_followed_too(standins):
    """A proxy may drop X-Corral-Leader: the 421's `leader` field says the same."""
    leader = standins()
    standby = standins("standby", leader.url)
    standby.leader_header = False
    with Client(standby.url) as client:
        assert client.submit(JOB)["job_id"] == 1
    assert len(leader.submissions) == 1


def test_a_controller_that_is_down_is_skipped(standins):
    leader = standins()
    with Client([nothing_listening(), leader.url]) as client:
        assert client.jobs() == []
        assert client.url == leader.url


def test_during_an_election_the_request_waits_for_the_new_leader(standins):
    standby = standins("standby", None)
    standby.become_leader_in(0.6)
    started = time.monotonic()
    with Client([nothing_listening(), standby.url]) as client:
        assert client.submit(JOB)["job_id"] == 1
    assert time.monotonic() - started >= 0.5


def test_an_election_that_does_not_end_fails_after_the_wait_naming_every_controller(standins):
    down = nothing_listening()
    standby = standins("standby", None)
    with Client([down, standby.url], leader_wait_s=0.4) as client, pytest.raises(ControllerUnreachable) as caught:
        client.nodes()
    assert str(caught.value) == (
        f"no leading controller at {down}, {standby.url}: no controller became the leader within 0.4 s "
        f"({down}: Connection refused; {standby.url}: not the leader: the leader is not known yet) "
        "(is 'corral up' running?)")


def test_when_every_controller_is_down_it_fails_at_once():
    urls = [nothing_listening(), nothing_listening()]
    started = time.monotonic()
    with Client(urls, leader_wait_s=30) as client, pytest.raises(ControllerUnreachable) as caught:
        client.nodes()
    assert time.monotonic() - started < 2
    assert caught.value.reason == f"{urls[0]}: Connection refused; {urls[1]}: Connection refused"


def test_one_controller_down_reads_as_before():
    url = nothing_listening()
    with Client(url) as client, pytest.raises(ControllerUnreachable) as caught:
        client.nodes()
    assert str(caught.value) == f"cannot reach the controller at {url} (is 'corral up' running?)"


def test_a_request_that_reached_a_controller_is_never_sent_to_another(standins):
    """A leader that dies once it has read the submission may have stored it: sending it to the next
    controller could make the job twice."""
    dying, other = standins(), standins()
    dying.drop_requests = True
    with Client([dying.url, other.url]) as client, pytest.raises(ClientError) as caught:
        client.submit(JOB)
    assert dying.requests == [("POST", "/api/v1/jobs")] and other.requests == []
    assert f"the controller at {dying.url} closed the connection without an answer" in str(caught.value)


def test_the_cli_takes_every_url_of_corral_url(standins, isolated, cli, monkeypatch):
    leader = standins()
    standby = standins("standby", leader.url)
    monkeypatch.setenv("CORRAL_URL", f"{nothing_listening()},{standby.url}")
    result = cli("nodes", "--json")
    assert (result.exit_code, result.stdout) == (0, "[]\n"), result.output
    assert leader.requests == [("GET", "/api/v1/nodes")]


@pytest.mark.parametrize(("urls", "message"), [
    ("http://a:1,", "has an empty controller URL"),
    ("http://a:1,http://[::1", "invalid controller URL 'http://[::1' (from --url): Invalid IPv6 URL"),
])
def test_bad_url_lists_get_clear_errors(isolated, cli, urls, message):
    result = cli("nodes", "--url", urls)
    assert result.exit_code == 1 and message in result.stderr and "Traceback" not in result.output


def test_a_bad_leader_wait_gets_a_clear_error(isolated, cli, monkeypatch):
    monkeypatch.setenv("CORRAL_LEADER_WAIT_S", "a while")
    result = cli("nodes", "--url", "http://127.0.0.1:9")
    assert result.exit_code == 1
    assert result.stderr == ("corral: error: CORRAL_LEADER_WAIT_S='a while': expected a number of seconds, "
                             "0 or more\n")
