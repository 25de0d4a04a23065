"""Who a node may vouch for, and who may submit a job as root (docs/security.md, "Who may vouch for whom"):
the probe's attacks against the real controller (build_app over HTTP, its SQLite store), with real Unix
users made by useradd (names with `ident`, removed afterwards). Every refusal is a 403 (or 422 for a pair
the host contradicts), names its reason, is in the audit log, and issues nothing."""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from corral.controller import credentials as cred
from corral.controller.__main__ import build_app
from corral.controller.auth import AuthSettings
from corral.engine.config import EngineConfig
from corral.protocol import API_PREFIX
from corral.store import Store
from tests.cli.standin import ServerThread

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="creates Unix users: needs root and useradd")

SECRET = "vouch-ident-secret"
KEY = cred.signing_key(SECRET)
ROUTE = "/agents/node1/user-credentials"


@dataclass
class Controller:
    url: str
    user: pwd.struct_passwd  # an ordinary user of this host
    boss: pwd.struct_passwd  # an [auth] admin, not root
    workdir: Path

    def http(self, credential: str | None = SECRET) -> httpx.Client:
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        return httpx.Client(base_url=self.url + API_PREFIX, headers=headers, timeout=10, trust_env=False)

    def vouch(self, user: str, uid: int, node: str = "node1", credential: str | None = None) -> httpx.Response:
        with self.http(credential or cred.issue_agent(KEY, node)) as http:
            return http.post(f"/agents/{node}/user-credentials", json={"user": user, "uid": uid, "gid": uid})

    def audit(self, action: str) -> list[dict]:
        with self.http() as http:
            return [e for e in http.get("/audit", params={"limit": 100_000}).json() if e["action"] == action]

    def submit(self, credential: str, **fields) -> httpx.Response:
        with self.http(credential) as http:
            return http.post("/jobs", json={"workdir": str(self.workdir), "argv": ["true"], "hold": True, **fields})


def free_uid(start: int) -> int:
    """A uid this host has no user for (from `start` up)."""
    uid = start
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


@pytest.fixture(scope="module")
def unix_users() -> Iterator[dict[str, pwd.struct_passwd]]:
    tag, made = secrets.token_hex(3), {}
    try:
        for role in ("user", "boss"):
            name = f"ident{role}{tag}"
            subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name], check=True)
            made[role] = pwd.getpwnam(name)
        yield made
    finally:
        for entry in made.values():
            subprocess.run(["userdel", entry.pw_name], check=False)


@pytest.fixture
def controller(tmp_path: Path, unix_users) -> Iterator[Controller]:
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    boss = unix_users["boss"]
    auth = AuthSettings(admins=frozenset({boss.pw_name}))
    with ServerThread(build_app(EngineConfig(), store, SECRET, auth=auth), lifespan="on") as server:
        live = Controller(server.url, unix_users["user"], boss, tmp_path)
        with live.http() as http:
            registered = http.post("/agents/register", json={"node": "node1", "address": "127.0.0.1", "gpus": [],
                                                             "cpus": 4, "mem_mib": 4000})
        assert registered.status_code == 200, registered.text
        yield live


def assert_refused(controller: Controller, reply: httpx.Response, target: str, reason: str, who: str = "node1"):
    assert reply.status_code == 403, reply.text
    assert reason in reply.json()["detail"]
    entries = [e for e in controller.audit("issue user credential") if e["target"] == target]
    assert [(e["who"], e["credential"], e["outcome"]) for e in entries] == [(who, "agent", "denied")]
    assert reason in entries[0]["detail"]


def test_a_nodes_credential_cannot_buy_root_under_a_made_up_uid(controller):
    """The probe's attack (a): root's name with uid 4242 was signed, since only uid 0 was refused."""
    reply = controller.vouch("root", 4242)
    assert_refused(controller, reply, "user root (uid 4242)", "an agent cannot vouch for root (user root, uid 4242)")


def test_uid_0_under_another_name_is_root_too(controller):
    uid0_alias = f"identroot{secrets.token_hex(3)}"
    reply = controller.vouch(uid0_alias, 0)
    assert_refused(controller, reply, f"user {uid0_alias} (uid 0)", f"cannot vouch for root (user {uid0_alias}, uid 0)")


def test_a_name_whose_uid_is_0_here_is_root_whatever_uid_is_claimed(controller):
    alias = f"identr{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--non-unique", "--uid", "0", "--no-create-home", "--no-user-group", "--gid", "0",
                    "--shell", "/usr/sbin/nologin", alias], check=True)
    try:
        reply = controller.vouch(alias, 4243)
    finally:
        # --force: plain userdel refuses a user whose uid (0) has processes running, and a uid-0 name must
        # not outlive the test.
        subprocess.run(["userdel", "--force", alias], check=True, capture_output=True)
    assert alias not in Path("/etc/passwd").read_text()
    assert_refused(controller, reply, f"user {alias} (uid 4243)", f"cannot vouch for root (user {alias}, uid 4243)")


def test_a_system_account_is_never_vouched_for(controller):
    reply = controller.vouch("identdaemon", 2)
    assert_refused(controller, reply, "user identdaemon (uid 2)",
                   "an agent cannot vouch for uid 2 (user identdaemon): uids below 1000 are system accounts")


def test_a_pair_the_controllers_host_contradicts_is_refused(controller):
    user, other_uid = controller.user, free_uid(controller.user.pw_uid + 1000)
    reply = controller.vouch(user.pw_name, other_uid)
    assert_refused(controller, reply, f"user {user.pw_name} (uid {other_uid})",
                   f"user {user.pw_name} has uid {user.pw_uid} on the controller's host, not {other_uid}")
    stranger = f"identnobody{secrets.token_hex(3)}"
    reply = controller.vouch(stranger, user.pw_uid)
    assert_refused(controller, reply, f"user {stranger} (uid {user.pw_uid})",
                   f"uid {user.pw_uid} is user {user.pw_name} on the controller's host, not {stranger}")


def test_an_ordinary_user_is_vouched_for_and_acts_as_themselves(controller):
    user = controller.user
    reply = controller.vouch(user.pw_name, user.pw_uid)
    assert reply.status_code == 200, reply.text
    with controller.http(reply.json()["credential"]) as http:
        assert http.get("/whoami").json() == {"kind": "user", "name": user.pw_name, "uid": user.pw_uid,
                                              "credential": "vouched by agent node1", "roles": []}
    stranger, uid = f"identremote{secrets.token_hex(3)}", free_uid(50_000)  # unknown here: the node's word holds
    assert controller.vouch(stranger, uid).status_code == 200


def test_a_join_tokens_agent_credential_cannot_buy_root_either(controller):
    """The probe's attack (b): a leaked join token buys a node's credential, which buys nothing more."""
    with controller.http() as http:
        token = http.post("/join-tokens", json={"node": "identjoined"}).json()["token"]
    with controller.http(token) as http:
        joined = http.post("/agents/join", json={"node": "identjoined"})
    assert joined.status_code == 200, joined.text
    agent_credential = joined.json()["credential"]
    for user, uid in (("root", 4242), ("root", 0), ("identany", 0)):
        reply = controller.vouch(user, uid, node="identjoined", credential=agent_credential)
        assert_refused(controller, reply, f"user {user} (uid {uid})", "an agent cannot vouch for root",
                       who="identjoined")


def test_a_signed_vouched_credential_for_root_is_refused_at_use(controller):
    for user, uid in (("root", 4242), ("root", 0), ("identany", 0), ("identsys", 5)):
        forged = cred.issue_user(KEY, user, uid, uid, time.time(), 60, "node1")
        with controller.http(forged) as http:
            assert http.get("/whoami").status_code == 401, (user, uid)


def test_agents_vouch_for_admins_allows_root_only_under_roots_own_uid(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    auth = AuthSettings(agents_vouch_for_admins=True)
    with ServerThread(build_app(EngineConfig(), store, SECRET, auth=auth), lifespan="on") as server:
        with httpx.Client(base_url=server.url + API_PREFIX, timeout=10,
                          headers={"Authorization": f"Bearer {cred.issue_agent(KEY, 'node1')}"}) as http:
            assert http.post(ROUTE, json={"user": "root", "uid": 0, "gid": 0}).status_code == 200
            refused = http.post(ROUTE, json={"user": "root", "uid": 4242, "gid": 0})
    assert refused.status_code == 403 and "is not root's account" in refused.json()["detail"]


# -- a job as root: only from root on the controller's host


def test_root_on_the_controllers_host_submits_as_root(controller):
    reply = controller.submit(SECRET, user="root")
    assert reply.status_code == 201, reply.text
    with controller.http() as http:
        job = http.get(f"/jobs/{reply.json()['job_id']}").json()
    assert (job["user"], job["uid"]) == ("root", 0)


def test_an_admin_who_is_not_root_cannot_submit_as_root(controller):
    with controller.http() as http:
        token = http.post("/tokens", json={"user": controller.boss.pw_name, "expires_s": 60}).json()["token"]
    refused = controller.submit(token, user="root")
    assert refused.status_code == 403, refused.text
    assert "a job as root (user root) is accepted only from root on the controller's host" in refused.json()["detail"]
    [entry] = [e for e in controller.audit("submit") if e["target"] == "user root"]
    assert (entry["who"], entry["outcome"]) == (controller.boss.pw_name, "denied")
    uid0 = controller.submit(token, user=f"identtoor{secrets.token_hex(2)}", uid=0)  # a name unknown here
    assert uid0.status_code == 403 and ", uid 0) is accepted only from root" in uid0.json()["detail"]
    with controller.http(token) as http:  # nor by way of root's token
        refused = http.post("/tokens", json={"user": "root", "expires_s": 60})
    assert refused.status_code == 403, refused.text
    assert "a token as root (user root) is accepted only from root" in refused.json()["detail"]
    assert [e["outcome"] for e in controller.audit("create token") if e["target"] == "user root"] == ["denied"]
    mine = controller.submit(token, user=controller.boss.pw_name)  # for themselves: their own uid, not 0
    assert mine.status_code == 201, mine.text
    with controller.http() as http:
        assert http.get(f"/jobs/{mine.json()['job_id']}").json()["uid"] == controller.boss.pw_uid


def test_a_vouched_user_cannot_submit_as_root(controller):
    user = controller.user
    credential = controller.vouch(user.pw_name, user.pw_uid).json()["credential"]
    refused = controller.submit(credential, user="root", uid=0)
    assert refused.status_code == 403 and "accepted only from root" in refused.json()["detail"]


def test_an_admins_uid_that_the_host_contradicts_is_refused(controller):
    user = controller.user
    for name, uid, reason in ((user.pw_name, user.pw_uid + 1, f"user {user.pw_name} has uid {user.pw_uid} on the "
                                                              f"controller's host, not {user.pw_uid + 1}"),
                              ("root", 4242, "user root is root, whose uid is 0, not 4242")):
        refused = controller.submit(SECRET, user=name, uid=uid)
        assert refused.status_code == 422 and refused.json()["detail"] == f"user and uid disagree: {reason}"
        assert [e["detail"] for e in controller.audit("submit") if e["target"] == f"user {name}"][-1] == reason
    with controller.http() as http:
        assert http.get("/jobs", params={"all": "true"}).json() == []  # nothing half-applied
