"""The zero-set-up identity on a host where only an agent runs: the agent serves an auth socket, the kernel
names the caller, and the controller issues a credential on the word of that node's agent (POST
/agents/{node}/user-credentials, its agent credential only), recorded in the audit log. Never root's or an
admin's power unless [auth] agents_vouch_for_admins. Real controller and agent processes, real Unix users
(tests/controller/test_identity.py runs each command as its user)."""
from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corral.controller import credentials as cred
from corral.controller.__main__ import build_app
from corral.controller.auth import AuthSettings
from corral.engine.config import EngineConfig
from corral.protocol import API_PREFIX
from corral.slurm.common.target import TargetError, socket_credential
from corral.store import Store
from tests.cli.standin import ServerThread
from tests.controller.test_identity import Cluster as UserCluster
from tests.controller.test_identity import UnixUser, as_user, slurm_command, unix_users
from tests.e2e.harness import Cluster, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="creates Unix users: needs root")]


class AgentHost:
    """A controller, and node1's agent started with its own agent credential, an auth socket and the host's
    cluster.json (what docs/adding-a-machine.md tells an admin to run)."""

    def __init__(self, root: Path, users: dict, admins: list[str]) -> None:
        self.cluster = Cluster(root, nodes=1, gpus=0, config=f"[auth]\nadmins = {json.dumps(admins)}\n")
        self.key = cred.signing_key(self.cluster.secret)
        self.socket = root / "run" / "auth.sock"
        self.cluster_file = root / "etc" / "cluster.json"
        self.users = UserCluster(self.cluster.url, root, self.socket, self.cluster_file, users)

    def start(self) -> None:
        root = self.cluster.root
        self.cluster.start_controller()
        credential_file = root / "node1.credential"
        credential_file.write_text(cred.issue_agent(self.key, "node1"))
        credential_file.chmod(0o600)
        self.cluster.agents["node1"] = self.cluster._spawn(
            ["-m", "corral.agent", "--controller", self.cluster.url, "--secret-file", str(credential_file),
             "--node", "node1", "--gpus", "0", "--cpus", "4", "--mem-mib", "4000", "--no-cgroups",
             "--spool", str(root / "spool"), "--auth-socket", str(self.socket),
             "--cluster-file", str(self.cluster_file)], "agent-node1.log")
        wait_for(lambda: any(n["name"] == "node1" and n["state"] != "down" for n in self.cluster.nodes()),
                 message="node1's agent registered")

    def http(self, credential: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        return httpx.Client(base_url=self.cluster.url + API_PREFIX, headers=headers, timeout=10, trust_env=False)


@pytest.fixture(scope="module")
def host() -> Iterator[AgentHost]:
    root = Path(tempfile.mkdtemp(prefix="corral-agent-identity-"))
    root.chmod(0o755)
    with unix_users("alice", "bob", "admin") as users:
        host = AgentHost(root, users, admins=[users["admin"].name])
        try:
            host.start()
            yield host
        finally:
            host.cluster.stop()
            assert not host.socket.exists() and not host.cluster_file.exists(), "the agent removes both at exit"
            subprocess.run(["rm", "-rf", str(root)], check=True)


def test_the_agent_writes_the_hosts_cluster_file(host):
    assert json.loads(host.cluster_file.read_text()) == {"url": host.cluster.url, "auth_socket": str(host.socket)}
    assert stat.S_IMODE(host.cluster_file.stat().st_mode) == 0o644
    assert stat.S_IMODE(host.socket.stat().st_mode) == 0o666


def test_a_user_on_an_agent_host_submits_as_themselves_with_no_set_up(host):
    alice = host.users.users["alice"]
    code, out, err = slurm_command(host.users, alice, "sbatch", ["--parsable", "--hold", "--wrap", "true"])
    assert code == 0, err + host.cluster.logs()
    job_id = int(out)
    job = host.cluster.job(job_id)
    assert (job["user"], job["uid"]) == (alice.name, alice.uid)
    with host.http(host.users.credential_of(alice)) as http:
        assert http.get("/whoami").json() == {"kind": "user", "name": alice.name, "uid": alice.uid,
                                              "credential": "vouched by agent node1", "roles": []}
    with host.http(host.cluster.secret) as http:
        audit = http.get("/audit", params={"limit": 100_000}).json()
    issued = [(e["who"], e["credential"], e["detail"]) for e in audit if e["action"] == "issue user credential"
              and e["target"] == f"user {alice.name} (uid {alice.uid})"]
    assert issued and set(issued) == {(alice.name, "vouched by agent node1", "vouched by agent node1")}
    submitted = [e for e in audit if e["action"] == "submit" and e["target"] == f"job {job_id}"]
    assert [(e["who"], e["credential"]) for e in submitted] == [(alice.name, "vouched by agent node1")]


def test_the_socket_cannot_give_another_users_credential(host):
    alice, bob = host.users.users["alice"], host.users.users["bob"]
    code, _, err = slurm_command(host.users, bob, "sbatch", ["--wrap", "true"], LOGNAME=alice.name, USER=alice.name)
    assert code == 1 and f"{bob.name} cannot submit a job as {alice.name}" in err
    claim = cred.verify_user(host.key, host.users.credential_of(bob), time.time())
    assert (claim.user, claim.uid, claim.gid, claim.vouched_by) == (bob.name, bob.uid, bob.gid, "node1")


def test_the_socket_vouches_only_for_the_name_the_node_gives_the_kernels_uid(host):
    """The agent asks for nobody the kernel did not name: a uid without a name here gets no credential, a
    system account's is refused by the controller, and every issued one is the node's own (name, uid)."""
    uid = next(u for u in range(60_000, 65_000) if _no_user(u))
    with pytest.raises(RuntimeError, match=f"uid {uid} has no user name on node node1"):
        as_user(UnixUser("identghost", uid, uid), lambda: socket_credential(str(host.socket)))
    system = min((e for e in pwd.getpwall() if 0 < e.pw_uid < 1000), key=lambda e: e.pw_uid)  # daemon, mostly
    with pytest.raises(RuntimeError, match=f"an agent cannot vouch for uid {system.pw_uid} .*system accounts"):
        as_user(UnixUser(system.pw_name, system.pw_uid, system.pw_gid), lambda: socket_credential(str(host.socket)))
    bob = host.users.users["bob"]
    claim = cred.verify_user(host.key, host.users.credential_of(bob), time.time())
    assert (claim.user, claim.uid) == (bob.name, bob.uid)


def _no_user(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return True
    return False


def test_the_vouching_route_takes_only_that_nodes_agent_credential(host):
    alice = host.users.users["alice"]
    body = {"user": alice.name, "uid": alice.uid, "gid": alice.gid}
    route = "/agents/node1/user-credentials"
    refused = {None: 401, "ca1.node1.forged": 401, host.users.credential_of(alice): 403,
               cred.issue_agent(host.key, "node2"): 403}
    for credential, status in refused.items():
        with host.http(credential) as http:
            reply = http.post(route, json=body)
        assert reply.status_code == status, (credential, reply.text)
    with host.http(cred.issue_agent(host.key, "node1")) as http:
        made = http.post(route, json=body)
        assert made.status_code == 200, made.text
        assert http.post(route, json={**body, "user": "a:b"}).status_code == 422
        root = http.post(route, json={"user": "root", "uid": 0, "gid": 0})
        assert root.status_code == 403 and "cannot vouch for root" in root.json()["detail"]
    with host.http(made.json()["credential"]) as http:
        assert http.get("/whoami").json()["name"] == alice.name


def test_root_and_admins_vouched_by_an_agent_get_no_power(host):
    with pytest.raises(TargetError, match="cannot vouch for root"):
        socket_credential(str(host.socket))  # this test runs as root
    admin = host.users.users["admin"]
    code, _, err = slurm_command(host.users, admin, "scontrol", ["update", "NodeName=node1", "State=DRAIN",
                                                                "Reason=x"])
    assert (code, err) == (1, "slurm_update error: Invalid user id\n")
    with host.http(host.users.credential_of(admin)) as http:
        assert http.get("/whoami").json()["roles"] == []
    with host.http(host.cluster.secret) as http:  # the same user with a token is an admin
        token = http.post("/tokens", json={"user": admin.name, "expires_s": 60}).json()["token"]
    with host.http(token) as http:
        assert "admin" in http.get("/whoami").json()["roles"]
    forged = cred.issue_user(host.key, "root", 0, 0, time.time(), 60, "node1")
    with host.http(forged) as http:
        assert http.get("/whoami").status_code == 401  # even one signed: the controller never issues it


def test_agents_vouch_for_admins_when_the_config_says_so(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    auth = AuthSettings(admins=frozenset({"boss"}), agents_vouch_for_admins=True)
    with ServerThread(build_app(EngineConfig(), store, "s3cret", auth=auth), lifespan="on") as server:
        agent = cred.issue_agent(cred.signing_key("s3cret"), "node1")
        with httpx.Client(base_url=server.url + API_PREFIX, headers={"Authorization": f"Bearer {agent}"}) as http:
            made = {user: http.post("/agents/node1/user-credentials", json={"user": user, "uid": uid, "gid": uid})
                    for user, uid in (("boss", next(u for u in range(41_234, 50_000) if _no_user(u))), ("root", 0))}
        for user, reply in made.items():
            assert reply.status_code == 200, reply.text
            headers = {"Authorization": f"Bearer {reply.json()['credential']}"}
            with httpx.Client(base_url=server.url + API_PREFIX, headers=headers) as http:
                assert "admin" in http.get("/whoami").json()["roles"], user
