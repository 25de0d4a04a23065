"""`corral agent join`'s checks before it asks the controller anything: a machine that has joined needs no
token (and is not asked for one), and what cannot work is said in one line, with nothing written. The
exchange itself runs against the real controller in tests/e2e/test_join.py."""
from __future__ import annotations

import pytest

from corral.controller import credentials as cred

UNREACHABLE = "http://127.0.0.1:9"  # nothing listens: any request would fail


@pytest.fixture
def join(cli, isolated, monkeypatch):
    monkeypatch.delenv("CORRAL_JOIN_TOKEN", raising=False)

    def run(*args: str):
        return cli("agent", "join", UNREACHABLE, "--credential-file", str(isolated / "agent.credential"),
                   "--env-file", str(isolated / "agent.env"), *args)

    return run


def test_a_machine_that_joined_needs_no_token(join, isolated):
    (isolated / "agent.credential").write_text(cred.issue_agent(cred.signing_key("s"), "gpu01") + "\n")
    done = join("--node", "gpu01")
    assert done.exit_code == 0, done.output
    assert "has joined as node gpu01" in done.output and "systemctl enable --now corral-agent" in done.output
    assert not (isolated / "agent.env").exists()


def test_refusals_before_any_request_write_nothing(join, isolated):
    no_token = join("--node", "gpu01")
    assert no_token.exit_code == 1 and "corral: error: a join token is needed" in no_token.output
    not_join = join("--node", "gpu01", "--token", "ct1.3.secret")
    assert not_join.exit_code == 1 and "--token is not a join token" in not_join.output
    bad_name = join("--node", "gpu 01", "--token", "cjt1.1.x")
    assert bad_name.exit_code == 1 and "invalid node name" in bad_name.output
    assert not (isolated / "agent.credential").exists() and not (isolated / "agent.env").exists()
    unreachable = join("--node", "gpu01", "--token", "cjt1.1.x")
    assert unreachable.exit_code == 1 and "cannot reach the controller at http://127.0.0.1:9" in unreachable.output
    assert not (isolated / "agent.credential").exists()


def test_another_nodes_credential_or_a_foreign_file_is_left_alone(join, isolated):
    credential = isolated / "agent.credential"
    credential.write_text(cred.issue_agent(cred.signing_key("s"), "gpu01"))
    other = join("--node", "gpu02", "--token", "cjt1.1.x")
    assert other.exit_code == 1 and "holds node gpu01's credential, not gpu02's" in other.output
    credential.write_text("the cluster secret")
    foreign = join("--node", "gpu02", "--token", "cjt1.1.x")
    assert foreign.exit_code == 1 and "not an agent credential" in foreign.output
    assert credential.read_text() == "the cluster secret"


def test_token_create_keeps_join_and_user_options_apart(cli, isolated):
    node_only = cli("token", "create", "--node", "gpu01")
    assert node_only.exit_code == 1 and "--node is for join tokens: add --join" in node_only.output
    user_join = cli("token", "create", "--join", "--user", "alice")
    assert user_join.exit_code == 1 and "--user is for API tokens" in user_join.output


def test_several_controller_urls_are_asked_in_turn_and_a_bad_list_is_refused(cli, isolated):
    paths = ("--credential-file", str(isolated / "agent.credential"), "--env-file", str(isolated / "agent.env"))
    both = cli("agent", "join", f"{UNREACHABLE},http://127.0.0.1:7", "--node", "gpu01", "--token", "cjt1.1.x",
               *paths)
    assert both.exit_code == 1 and "http://127.0.0.1:9" in both.output and "http://127.0.0.1:7" in both.output
    empty = cli("agent", "join", f"{UNREACHABLE},", "--node", "gpu01", "--token", "cjt1.1.x", *paths)
    assert empty.exit_code == 1 and "empty controller URL" in empty.output
    assert not (isolated / "agent.credential").exists()
