"""The Slurm commands' client follows the leader of several controllers (issue 13), against stand-ins that
answer as a leader or a standby does under the HA contract (tests/ha_standin.py says why a stand-in; the
end-to-end tests against real controllers come with the controller side)."""
from __future__ import annotations

import time

import pytest

from corral.slurm.common import http
from corral.slurm.common.command import connect
from corral.slurm.common.target import TargetError
from tests.ha_standin import nothing_listening

from .commands import command_env, run

JOB = {"name": "x", "argv": ["true"]}


def test_a_standby_sends_the_request_to_the_leader_it_names_and_the_leader_is_remembered(standins):
    leader = standins()
    standby = standins("standby", leader.url)
    controller = http.Controller([standby.url, leader.url])
    assert controller.submit(JOB)["job_id"] == 1
    assert controller.url == leader.url
    assert controller.nodes() == []  # straight to the leader now
    assert standby.requests == [("POST", "/api/v1/jobs")]
    assert leader.requests == [("POST", "/api/v1/jobs"), ("GET", "/api/v1/nodes")]


def test_a_leader_the_client_was_not_told_of_is_followed(standins):
    leader = standins()
    standby = standins("standby", leader.url)
    assert http.Controller(standby.url).submit(JOB)["job_id"] == 1
    assert len(leader.submissions) == 1


def test_a_controller_that_is_down_is_skipped(standins):
    leader = standins()
    controller = http.Controller([nothing_listening(), leader.url])
    assert controller.submit(JOB)["job_id"] == 1
    assert controller.url == leader.url


def test_during_an_election_the_request_waits_for_the_new_leader(standins):
    down = nothing_listening()  # the old leader
    standby = standins("standby", None)
    standby.become_leader_in(0.6)
    started = time.monotonic()
    assert http.Controller([down, standby.url]).submit(JOB)["job_id"] == 1
    assert time.monotonic() - started >= 0.5
    assert len(standby.submissions) == 1


def test_an_election_that_does_not_end_fails_after_the_wait_naming_every_controller(standins):
    down = nothing_listening()
    standby = standins("standby", None)
    started = time.monotonic()
    with pytest.raises(http.Unreachable) as caught:
        http.Controller([down, standby.url], leader_wait_s=0.5).submit(JOB)
    assert 0.4 <= time.monotonic() - started < 3
    message = str(caught.value)
    assert "no controller became the leader within 0.5 s" in message
    assert f"{down}: Connection refused" in message
    assert f"{standby.url}: not the leader: the leader is not known yet" in message


def test_when_every_controller_is_down_it_fails_at_once():
    urls = [nothing_listening(), nothing_listening()]
    started = time.monotonic()
    with pytest.raises(http.Unreachable) as caught:
        http.Controller(urls, leader_wait_s=30).nodes()
    assert time.monotonic() - started < 2
    assert caught.value.url == ", ".join(urls)
    assert caught.value.reason == f"{urls[0]}: Connection refused; {urls[1]}: Connection refused"


def test_a_request_that_reached_a_controller_is_never_sent_to_another(standins):
    """A leader that dies once it has read the submission may have stored it: sending it to the next
    controller could make the job twice."""
    dying, other = standins(), standins()
    dying.drop_requests = True
    with pytest.raises(http.Unreachable) as caught:
        http.Controller([dying.url, other.url]).submit(JOB)
    assert dying.requests == [("POST", "/api/v1/jobs")] and other.requests == []
    assert "not sent to another controller" in str(caught.value)


def test_connect_takes_every_url_of_corral_url_and_the_wait(standins):
    leader = standins()
    standby = standins("standby", leader.url)
    controller = connect({"CORRAL_URL": f"{standby.url}, {leader.url}/", "CORRAL_LEADER_WAIT_S": "2.5",
                          "HOME": "/nonexistent"})
    assert controller.controllers.urls == (standby.url, leader.url)
    assert controller.controllers.wait_s == 2.5


@pytest.mark.parametrize(("env", "message"), [
    ({"CORRAL_URL": "http://a:1,,http://b:2"}, "has an empty controller URL"),
    ({"CORRAL_URL": "http://a:1,ftp://b:2"}, "invalid controller URL 'ftp://b:2' (from CORRAL_URL)"),
    ({"CORRAL_URL": "http://a:1,a:1"}, "names the controller http://a:1 more than once"),
    ({"CORRAL_URL": "http://a:1,https://b:2"}, "mixes http:// and https://"),
    ({"CORRAL_URL": "http://a:1", "CORRAL_LEADER_WAIT_S": "soon"}, "CORRAL_LEADER_WAIT_S='soon'"),
    ({"CORRAL_URL": "http://a:1", "CORRAL_LEADER_WAIT_S": "-1"}, "0 or more"),
])
def test_bad_lists_and_waits_get_clear_errors(env, message):
    with pytest.raises(TargetError) as caught:
        connect({**env, "HOME": "/nonexistent"})
    assert message in str(caught.value)


def test_sbatch_submits_through_the_leader_once(standins, tmp_path):
    leader = standins()
    standby = standins("standby", leader.url)
    secret = tmp_path / "secret"
    secret.write_text("s\n")
    result = run("sbatch", "--wrap", "true", env=command_env(f"{nothing_listening()},{standby.url}", secret),
                 cwd=tmp_path)
    assert (result.code, result.stdout) == (0, "Submitted batch job 1\n"), result
    assert len(leader.submissions) == 1 and standby.submissions == []


def test_squeue_names_every_controller_when_none_answers(tmp_path):
    urls = f"{nothing_listening()},{nothing_listening()}"
    secret = tmp_path / "secret"
    secret.write_text("s\n")
    result = run("squeue", env=command_env(urls, secret))
    assert result.code == 1
    first, second = urls.split(",")
    assert (f"squeue: error: corral's controllers at {first}, {second} (from CORRAL_URL) did not answer: "
            f"{first}: Connection refused; {second}: Connection refused") in result.stderr


def test_the_leader_named_in_the_body_is_followed_too(standins):
    """A proxy may drop X-Corral-Leader: the 421's `leader` field says the same."""
    leader = standins()
    standby = standins("standby", leader.url)
    standby.leader_header = False
    assert http.Controller(standby.url).submit(JOB)["job_id"] == 1
    assert len(leader.submissions) == 1
