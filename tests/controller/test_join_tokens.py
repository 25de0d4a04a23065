"""One-time join tokens against the real controller (build_app served over HTTP, its SQLite store): an admin
makes one, a new machine's agent exchanges it once for its node's credential; every refusal is a 401 or 403,
is in the audit log, and uses nothing up."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from corral.controller import credentials as cred
from corral.controller.__main__ import build_app
from corral.engine.config import EngineConfig
from corral.protocol import API_PREFIX
from corral.store import Store
from tests.cli.standin import ServerThread

SECRET = "join-secret"
NODE = {"address": "127.0.0.1", "gpus": [], "cpus": 16, "mem_mib": 64000}
KEY = cred.signing_key(SECRET)


@dataclass
class Controller:
    url: str
    clock: list[float]  # the controller's time: tests move it forward

    def http(self, credential: str | None = SECRET) -> httpx.Client:
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        return httpx.Client(base_url=self.url + API_PREFIX, headers=headers, timeout=10, trust_env=False)

    def make_token(self, **body) -> dict:
        with self.http() as http:
            reply = http.post("/join-tokens", json=body)
        assert reply.status_code == 201, reply.text
        return reply.json()

    def join(self, token: str | None, node: str) -> httpx.Response:
        with self.http(token) as http:
            return http.post("/agents/join", json={"node": node})

    def token(self, token_id: int) -> dict:
        with self.http() as http:
            return next(t for t in http.get("/join-tokens").json() if t["id"] == token_id)

    def audit(self, action: str | None = "join node") -> list[dict]:
        with self.http() as http:
            return [e for e in http.get("/audit").json() if action is None or e["action"] == action]


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    clock = [time.time()]
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    with ServerThread(build_app(EngineConfig(), store, SECRET, clock=lambda: clock[0])) as server:
        live = Controller(server.url, clock)
        with live.http() as http:  # node1 is in the cluster already
            assert http.post("/agents/register", json={"node": "node1", **NODE}).status_code == 200
        yield live


def alice() -> str:
    return cred.issue_user(KEY, "alice", 1000, 1000, time.time(), 300)


def test_a_join_token_is_exchanged_once_for_the_nodes_agent_credential(controller):
    made = controller.make_token(node="gpu07", description="rack 3")
    assert made["token"].startswith(cred.JOIN_PREFIX) and made["node"] == "gpu07"
    assert made["expires"] == pytest.approx(made["created"] + 3600)  # the default lifetime: 1 h
    assert controller.token(made["id"])["token"] is None  # stored hashed: never shown again
    reply = controller.join(made["token"], "gpu07")
    assert reply.status_code == 200, reply.text
    credential = reply.json()["credential"]
    assert credential == cred.issue_agent(KEY, "gpu07")
    with controller.http(credential) as http:  # the new node's agent registers with it
        assert http.post("/agents/register", json={"node": "gpu07", **NODE}).status_code == 200
        assert http.post("/agents/register", json={"node": "node1", **NODE}).status_code == 403
    again = controller.join(made["token"], "gpu07")
    assert again.status_code == 401 and f"join token {made['id']} was already used" in again.json()["detail"]
    used = controller.token(made["id"])
    assert (used["used_by"], used["used_from"]) == ("gpu07", "127.0.0.1") and used["used"] is not None
    created = controller.audit("create join token")
    assert [(e["who"], e["target"], e["outcome"]) for e in created] == [("root", f"join token {made['id']}",
                                                                          "allowed")]
    joins = controller.audit()
    assert [(e["who"], e["credential"], e["outcome"]) for e in joins] == [
        ("gpu07", f"join token {made['id']}", "allowed"), ("gpu07", f"join token {made['id']}", "unauthenticated")]
    assert joins[0]["detail"] == "from 127.0.0.1; token made by root"


def test_of_agents_racing_with_one_token_exactly_one_joins(controller):
    token = controller.make_token()["token"]
    start, replies = threading.Barrier(8), {}

    def join(node: str) -> None:
        start.wait()
        replies[node] = controller.join(token, node)

    threads = [threading.Thread(target=join, args=(f"new{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [node for node, reply in replies.items() if reply.status_code == 200]
    assert len(winners) == 1, {n: r.text for n, r in replies.items()}
    assert all(r.status_code == 401 and "already used" in r.json()["detail"]
               for n, r in replies.items() if n not in winners)
    made = controller.token(1)
    assert made["used_by"] == winners[0]
    assert [e["outcome"] for e in controller.audit()].count("allowed") == 1


def _refused(controller: Controller, token: str | None, node: str, status: int, reason: str) -> None:
    reply = controller.join(token, node)
    assert reply.status_code == status and reason in reply.json()["detail"], reply.text
    last = controller.audit(None)[-1]
    assert last["action"] in ("join node", "POST /api/v1/agents/join"), last
    assert last["outcome"] == ("unauthenticated" if status == 401 else "denied") and reason in last["detail"]


def test_refused_joins_are_audited_and_use_nothing_up(controller):
    made = controller.make_token(node="gpu07")
    token = made["token"]
    token_id, secret = cred.split_token(token, cred.JOIN_PREFIX)
    forged = cred.new_token(token_id, secret[:-2] + ("zz" if not secret.endswith("zz") else "yy"), cred.JOIN_PREFIX)
    _refused(controller, forged, "gpu07", 401, f"join token {token_id} is unknown or its secret is wrong")
    _refused(controller, cred.new_token(99, secret, cred.JOIN_PREFIX), "gpu07", 401,
             "join token 99 is unknown or its secret is wrong")
    _refused(controller, cred.JOIN_PREFIX + "x.y", "gpu07", 401, "malformed join token")
    _refused(controller, token, "gpu08", 403, f"join token {token_id} is for node gpu07, not gpu08")
    assert controller.token(token_id)["used"] is None
    assert all("127.0.0.1" in e["detail"] for e in controller.audit())  # the joins' address
    assert controller.join(token, "gpu07").status_code == 200  # still good for its own node


def test_an_unbound_token_does_not_join_a_node_already_in_the_cluster(controller):
    made = controller.make_token()
    _refused(controller, made["token"], "node1", 403, "node node1 is already in the cluster")
    assert controller.token(made["id"])["used"] is None
    bound = controller.make_token(node="node1")  # a machine reinstalled under its name
    assert controller.join(bound["token"], "node1").json()["credential"] == cred.issue_agent(KEY, "node1")


def test_expired_and_revoked_tokens_are_refused(controller):
    expiring = controller.make_token(expires_s=60)
    revoked = controller.make_token()
    with controller.http() as http:
        assert http.delete(f"/join-tokens/{revoked['id']}").status_code == 204
    controller.clock[0] += 61
    _refused(controller, expiring["token"], "gpu07", 401, f"join token {expiring['id']} expired")
    _refused(controller, revoked["token"], "gpu07", 401, f"join token {revoked['id']} was revoked")
    assert all(controller.token(t["id"])["used"] is None for t in (expiring, revoked))


def test_credentials_other_than_a_join_token_cannot_join(controller):
    _refused(controller, None, "gpu07", 401, "no credential")
    _refused(controller, alice(), "gpu07", 403, "a user credential cannot join a node")
    _refused(controller, cred.issue_agent(KEY, "node1"), "gpu07", 403, "an agent credential cannot join a node")
    with controller.http() as http:
        reply = http.post("/agents/join", json={"node": "gpu07"})
    assert reply.status_code == 403 and "the service credential cannot join a node" in reply.json()["detail"]


def test_a_join_token_is_no_credential_on_user_or_agent_routes(controller):
    token = controller.make_token(node="gpu07")["token"]
    with controller.http(token) as http:
        for reply in (http.get("/jobs"), http.post("/agents/register", json={"node": "gpu07", **NODE}),
                      http.post("/join-tokens", json={})):
            assert reply.status_code == 401 and "a join token is not a credential" in reply.json()["detail"]
    assert controller.token(1)["used"] is None


def test_only_admins_make_list_and_revoke_join_tokens(controller):
    made = controller.make_token()
    with controller.http(alice()) as http:
        for reply in (http.post("/join-tokens", json={}), http.get("/join-tokens"),
                      http.delete(f"/join-tokens/{made['id']}")):
            assert reply.status_code == 403 and "needs the admin role" in reply.json()["detail"], reply.text
    with controller.http() as http:
        assert http.post("/join-tokens", json={"expires_s": 8 * 86400}).status_code == 422  # at most 7 days
        assert http.post("/join-tokens", json={"node": "bad name"}).status_code == 422
        assert http.delete("/join-tokens/99").status_code == 404
    assert controller.token(made["id"])["revoked"] is None


def test_token_ids_past_the_databases_integers_are_refused_not_a_server_error(controller):
    big = 10**20
    _refused(controller, f"{cred.JOIN_PREFIX}{big}.secret", "gpu07", 401, "malformed join token")
    with controller.http(f"{cred.TOKEN_PREFIX}{big}.secret") as http:
        reply = http.get("/whoami")
    assert reply.status_code == 401 and "malformed token" in reply.json()["detail"]
    with controller.http() as http:
        assert http.delete(f"/join-tokens/{big}").status_code == 422
        assert http.delete(f"/tokens/{big}").status_code == 422


def test_not_even_an_admins_job_handles_join_tokens(controller):
    with controller.http() as http:
        submitted = http.post("/jobs", json={"workdir": "/tmp", "user": "root", "argv": ["true"]})
        assert submitted.status_code == 201, submitted.text
        job = http.get(f"/jobs/{submitted.json()['job_id']}").json()
    job_credential = cred.issue_job(KEY, job["id"], 0, job["submit_time"])
    with controller.http(job_credential) as http:
        assert "admin" in http.get("/whoami").json()["roles"]
        for reply in (http.post("/join-tokens", json={}), http.get("/join-tokens")):
            assert reply.status_code == 403 and "a job's credential cannot handle join tokens" in reply.json()["detail"]
