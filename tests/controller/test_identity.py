"""Identity, credentials and roles against the real controller (build_app over HTTP, its auth socket, the
SQLite store), with real Unix users made here: each Slurm command runs in a child process that has become
that user (fork, setuid; no exec: the interpreter lives under /root), so the kernel's SO_PEERCRED, not the
client, says who is asking."""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from corral.controller import credentials as cred
from corral.controller.__main__ import build_app
from corral.controller.auth import AuthSettings
from corral.engine.config import EngineConfig
from corral.protocol import API_PREFIX
from corral.slurm.common.target import socket_credential
from corral.store import Store
from tests.cli.standin import ServerThread

SECRET = "identity-secret"
NODE = {"address": "127.0.0.1", "gpus": [], "cpus": 16, "mem_mib": 64000}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creates Unix users and changes uid: needs root")


@dataclass(frozen=True)
class UnixUser:
    name: str
    uid: int
    gid: int


@contextlib.contextmanager
def unix_users(*roles: str) -> Iterator[dict[str, UnixUser]]:
    """Fresh users (unique names: other tests may make their own alice), removed afterwards."""
    tag = secrets.token_hex(3)
    made: dict[str, UnixUser] = {}
    try:
        for role in roles:
            name = f"ct{role[:5]}{tag}"
            subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name], check=True)
            entry = pwd.getpwnam(name)
            made[role] = UnixUser(name, entry.pw_uid, entry.pw_gid)
        yield made
    finally:
        for user in made.values():
            subprocess.run(["userdel", user.name], check=False)


@dataclass
class Cluster:
    url: str
    root: Path  # world-searchable: the users' working directory, the socket, cluster.json
    socket: Path
    cluster_file: Path
    users: dict[str, UnixUser]

    def http(self, credential: str | None = SECRET) -> httpx.Client:
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        return httpx.Client(base_url=self.url + API_PREFIX, headers=headers, timeout=10, trust_env=False)

    def env(self, user: UnixUser, **extra: str) -> dict[str, str]:
        """A login environment: no token, no secret; the cluster found through the system-wide file."""
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.root), "LOGNAME": user.name, "USER": user.name,
                "XDG_CONFIG_HOME": str(self.root / "no-config"), "CORRAL_SYSTEM_CLUSTER_FILE": str(self.cluster_file),
                **extra}

    def credential_of(self, user: UnixUser) -> str:
        return as_user(user, lambda: socket_credential(str(self.socket)))


def as_user(user: UnixUser, action: Callable[[], object]) -> object:
    """`action()` run in a child process that has become `user`; its JSON-able result, or RuntimeError."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
            reply = ["ok", action()]
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            reply = ["error", f"{type(exc).__name__}: {exc}"]
        os.write(write_end, json.dumps(reply).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    status, value = json.loads(data)
    if status != "ok":
        raise RuntimeError(value)
    return value


def slurm_command(cluster: Cluster, user: UnixUser, prog: str, argv: list[str], **env: str) -> tuple[int, str, str]:
    """Run the Slurm command `prog` (its main()) as `user` in cluster.root: (exit status, stdout, stderr)."""
    import importlib

    main = importlib.import_module(f"corral.slurm.{prog}.main").main
    out, err = (tempfile.NamedTemporaryFile(dir=cluster.root, delete=False) for _ in range(2))
    for handle in (out, err):
        os.chmod(handle.name, 0o666)

    def run() -> int:
        os.chdir(cluster.root)
        os.environ.clear()
        os.environ.update(cluster.env(user, **env))
        os.dup2(os.open(out.name, os.O_WRONLY), 1)
        os.dup2(os.open(err.name, os.O_WRONLY), 2)
        sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)  # not pytest's capture
        try:
            return main(argv)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()

    code = as_user(user, run)
    texts = [Path(handle.name).read_text() for handle in (out, err)]
    for handle in (out, err):
        os.unlink(handle.name)
    return code, texts[0], texts[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-identity-"))
    root.chmod(0o755)
    with unix_users("alice", "bob", "carol") as users:
        socket_path = root / "run" / "auth.sock"
        cluster_file = root / "etc" / "cluster.json"
        store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('db') / 'corral.db'}")
        auth = AuthSettings(operators=frozenset({users["carol"].name}), socket=str(socket_path))
        with ServerThread(build_app(EngineConfig(), store, SECRET, auth=auth), lifespan="on") as server:
            cluster_file.parent.mkdir()
            cluster_file.write_text(json.dumps({"url": server.url, "auth_socket": str(socket_path)}))
            cluster_file.chmod(0o644)
            live = Cluster(server.url, root, socket_path, cluster_file, users)
            with live.http() as http:
                assert http.post("/agents/register", json={"node": "node1", **NODE}).status_code == 200
            yield live
        subprocess.run(["rm", "-rf", str(root)], check=True)


def submit_as(cluster: Cluster, user: UnixUser, *extra: str, **env: str) -> int:
    code, out, err = slurm_command(cluster, user, "sbatch", ["--parsable", "--hold", *extra, "--wrap", "true"], **env)
    assert code == 0, err
    return int(out.strip())


def test_the_socket_vouches_for_the_caller_uid(cluster):
    alice = cluster.users["alice"]
    with cluster.http(cluster.credential_of(alice)) as http:
        me = http.get("/whoami").json()
    assert me == {"kind": "user", "name": alice.name, "uid": alice.uid, "credential": "socket", "roles": []}


def test_sbatch_records_the_real_user_and_uid(cluster):
    alice = cluster.users["alice"]
    job_id = submit_as(cluster, alice)
    with cluster.http() as http:
        job = http.get(f"/jobs/{job_id}").json()
    assert (job["user"], job["uid"]) == (alice.name, alice.uid)


def test_a_user_cannot_submit_as_another(cluster):
    alice, bob = cluster.users["alice"], cluster.users["bob"]
    code, _, err = slurm_command(cluster, bob, "sbatch", ["--wrap", "true"], LOGNAME=alice.name, USER=alice.name)
    assert (code, err) == (1, "sbatch: error: Batch job submission failed: Access/permission denied\n"
                              f"sbatch: error: ({bob.name} cannot submit a job as {alice.name} (only an admin can))\n")
    with cluster.http(cluster.credential_of(bob)) as http:  # a body uid is never believed
        reply = http.post("/jobs", json={"workdir": "/tmp", "user": bob.name, "uid": 0, "argv": ["true"],
                                         "hold": True})
        assert reply.status_code == 201, reply.text
        assert http.get(f"/jobs/{reply.json()['job_id']}").json()["uid"] == bob.uid
        refused = http.post("/jobs", json={"workdir": "/tmp", "user": bob.name, "argv": ["true"], "priority": 10**6})
        assert refused.status_code == 403 and "priority" in refused.json()["detail"]


def test_scancel_of_another_users_job_is_refused_with_slurms_text(cluster):
    alice, bob = cluster.users["alice"], cluster.users["bob"]
    job_id = submit_as(cluster, alice)
    code, _, err = slurm_command(cluster, bob, "scancel", [str(job_id)])
    assert (code, err) == (210, f"scancel: error: Kill job error on job id {job_id}: Access/permission denied\n")
    code, _, err = slurm_command(cluster, bob, "scontrol", ["requeue", str(job_id)])
    assert (code, err) == (1, f"Access/permission denied for job {job_id}\n")
    code, _, err = slurm_command(cluster, bob, "scontrol", ["release", str(job_id)])
    assert code == 1 and err == f"Invalid user id for job {job_id}\nslurm_suspend error: Invalid user id\n"
    with cluster.http() as http:
        assert http.get(f"/jobs/{job_id}").json()["state"] == "PENDING"
    code, _, err = slurm_command(cluster, alice, "scancel", [str(job_id)])
    assert (code, err) == (0, "")
    with cluster.http() as http:
        job = http.get(f"/jobs/{job_id}").json()
    assert (job["state"], job["cancelled_by_uid"]) == ("CANCELLED", alice.uid)


def test_operators_drain_nodes_and_act_on_any_job_users_do_not(cluster):
    alice, carol = cluster.users["alice"], cluster.users["carol"]
    code, _, err = slurm_command(cluster, alice, "scontrol", ["update", "NodeName=node1", "State=DRAIN", "Reason=x"])
    assert (code, err) == (1, "slurm_update error: Invalid user id\n")
    job_id = submit_as(cluster, alice)
    code, _, err = slurm_command(cluster, carol, "scancel", [str(job_id)])
    assert (code, err) == (0, "")
    with cluster.http(cluster.credential_of(carol)) as http:
        assert http.post("/nodes/node1", json={"drain": True, "reason": "maint"}).status_code == 200
        assert http.post("/nodes/node1", json={"drain": False}).status_code == 200
        assert http.put("/tenancy", json={}).status_code == 403  # tenancy is the admins'


def test_account_coordinators_act_on_their_accounts_jobs(cluster):
    alice, bob = cluster.users["alice"], cluster.users["bob"]
    tenancy = {"accounts": [{"name": "lab", "coordinators": [bob.name]}, {"name": "team", "parent": "lab"}],
               "users": [{"name": alice.name, "accounts": ["team"]}, {"name": bob.name, "accounts": ["lab"]}]}
    with cluster.http() as http:
        assert http.put("/tenancy", json=tenancy).status_code == 200, http.put("/tenancy", json=tenancy).text
    try:
        job_id = submit_as(cluster, alice)
        code, _, err = slurm_command(cluster, bob, "scancel", [str(job_id)])
        assert (code, err) == (0, "")  # bob coordinates lab, and team is below it
    finally:
        with cluster.http() as http:
            http.put("/tenancy", json={})


def test_missing_forged_and_expired_credentials_get_401(cluster):
    alice = cluster.users["alice"]
    good = cluster.credential_of(alice)
    key = cred.signing_key(SECRET)
    body, _, signature = good.rpartition(".")
    forged_user = cred.USER_PREFIX + good[len(cred.USER_PREFIX):].replace(
        body[len(cred.USER_PREFIX):], cred._b64(f"root:0:0:{int(time.time())}:{int(time.time()) + 60}:00".encode()))
    expired = cred.issue_user(key, alice.name, alice.uid, alice.gid, time.time() - 600, 300)
    other_key = cred.issue_user(cred.signing_key("another cluster"), alice.name, alice.uid, alice.gid, time.time(), 300)
    cases = {None: "no credential", good[:-3] + "AAA": "bad signature", forged_user: "bad signature",
             expired: "expired", other_key: "bad signature", "not-the-secret": "unknown credential"}
    for credential, reason in cases.items():
        with cluster.http(credential) as http:
            reply = http.get("/jobs")
        assert reply.status_code == 401 and reason in reply.json()["detail"], (credential, reply.text)
    code, _, err = slurm_command(cluster, alice, "squeue", [], CORRAL_TOKEN=expired)
    assert code == 1 and "refused the credential (not authenticated: user credential expired)" in err


def test_tokens_are_created_used_listed_and_revoked(cluster):
    alice, bob = cluster.users["alice"], cluster.users["bob"]
    with cluster.http(cluster.credential_of(alice)) as http:
        made = http.post("/tokens", json={"expires_s": 3600, "description": "laptop"}).json()
        assert made["user"] == alice.name and made["token"].startswith(cred.TOKEN_PREFIX)
        assert [t["id"] for t in http.get("/tokens").json()] == [made["id"]]
        assert all(t["token"] is None for t in http.get("/tokens").json())  # stored hashed: never shown again
        assert http.post("/tokens", json={"user": bob.name}).status_code == 403
        assert http.get("/tokens", params={"all": True}).status_code == 403
    with cluster.http(made["token"]) as http:
        assert http.get("/whoami").json()["name"] == alice.name
    with cluster.http(cluster.credential_of(bob)) as http:
        assert http.delete(f"/tokens/{made['id']}").status_code == 403
    with cluster.http(cluster.credential_of(alice)) as http:
        assert http.delete(f"/tokens/{made['id']}").status_code == 204
    with cluster.http(made["token"]) as http:
        reply = http.get("/whoami")
    assert reply.status_code == 401 and "revoked" in reply.json()["detail"]
    wrong_secret = made["token"][:-2] + ("zz" if not made["token"].endswith("zz") else "yy")
    with cluster.http(wrong_secret) as http:
        assert http.get("/whoami").status_code == 401
    with cluster.http() as http:  # an admin may make one for anyone
        for_bob = http.post("/tokens", json={"user": bob.name, "expires_s": 60}).json()
    assert (for_bob["user"], for_bob["uid"]) == (bob.name, bob.uid)


def test_agent_and_user_credentials_stay_on_their_own_routes(cluster):
    alice = cluster.users["alice"]
    node1 = cred.issue_agent(cred.signing_key(SECRET), "node1")
    with cluster.http(node1) as http:
        assert http.post("/jobs", json={"workdir": "/tmp", "user": alice.name, "argv": ["true"]}).status_code == 403
        assert http.get("/jobs").status_code == 403
        assert http.post("/agents/register", json={"node": "node2", **NODE}).status_code == 403
        assert http.post("/agents/node2/events", json={"events": []}).status_code == 403
        assert http.post("/agents/register", json={"node": "node1", **NODE}).status_code == 200
    with cluster.http(cluster.credential_of(alice)) as http:
        reply = http.post("/agents/register", json={"node": "node1", **NODE})
        assert reply.status_code == 403 and "agent credential" in reply.json()["detail"]
        assert http.get("/agents/node1/commands", params={"wait_s": 0}).status_code == 403


def test_a_jobs_credential_acts_as_its_user_while_the_job_lives(cluster):
    alice = cluster.users["alice"]
    job_id = submit_as(cluster, alice)
    with cluster.http() as http:
        job = http.get(f"/jobs/{job_id}").json()
    job_credential = cred.issue_job(cred.signing_key(SECRET), job_id, alice.uid, job["submit_time"])
    with cluster.http(job_credential) as http:
        assert http.get("/whoami").json() | {"roles": []} == {
            "kind": "job", "name": alice.name, "uid": alice.uid, "credential": f"job {job_id}", "roles": []}
        assert http.post("/tokens", json={}).status_code == 403
        assert http.post(f"/jobs/{job_id}/cancel").status_code == 200
        reply = http.get("/whoami")
    assert reply.status_code == 401 and "has ended" in reply.json()["detail"]


def test_the_audit_log_records_changes_and_refusals_for_admins_only(cluster):
    alice, bob = cluster.users["alice"], cluster.users["bob"]
    job_id = submit_as(cluster, alice)
    slurm_command(cluster, bob, "scancel", [str(job_id)])
    with cluster.http(cluster.credential_of(alice)) as http:
        assert http.get("/audit").status_code == 403
    with cluster.http() as http:
        entries = http.get("/audit", params={"limit": 100_000}).json()
    mine = [(e["who"], e["action"], e["outcome"]) for e in entries if e["target"] == f"job {job_id}"]
    assert mine == [(alice.name, "submit", "allowed"), (bob.name, "cancel", "denied")]
    assert any(e["outcome"] == "unauthenticated" for e in entries)


def test_the_controller_prints_a_nodes_agent_credential(tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    done = subprocess.run([sys.executable, "-m", "corral.controller", "--secret-file", str(secret_file),
                           "--agent-credential", "gpu01"], capture_output=True, text=True, check=True)
    assert done.stdout == cred.issue_agent(cred.signing_key(SECRET), "gpu01") + "\n"
    assert cred.verify_agent(cred.signing_key(SECRET), done.stdout.strip()) == "gpu01"


def test_corral_token_and_audit_commands(cluster, monkeypatch):
    from typer.testing import CliRunner

    from corral.cli.main import app

    bob = cluster.users["bob"]
    monkeypatch.setenv("CORRAL_URL", cluster.url)
    monkeypatch.setenv("CORRAL_SECRET", SECRET)
    runner = CliRunner()
    made = runner.invoke(app, ["token", "create", "--user", bob.name, "--expires", "2h", "-d", "ci"])
    assert made.exit_code == 0, made.output
    token = made.stdout.splitlines()[0]
    token_id = token.split(".")[1]
    with cluster.http(token) as http:
        assert http.get("/whoami").json()["name"] == bob.name
    listed = runner.invoke(app, ["token", "list", "--all", "--json"])
    mine = next(t for t in json.loads(listed.stdout) if str(t["id"]) == token_id)
    assert (mine["user"], mine["description"], mine["expires"] - mine["created"]) == (bob.name, "ci", 7200)
    assert runner.invoke(app, ["token", "revoke", token_id]).stdout == f"Revoked token {token_id}\n"
    with cluster.http(token) as http:
        assert http.get("/whoami").status_code == 401
    bad = runner.invoke(app, ["token", "create", "--expires", "soon"])
    assert bad.exit_code != 0 and "invalid --expires 'soon'" in bad.output
    audit = runner.invoke(app, ["audit", "--since", "1h", "--json"])
    actions = [(e["action"], e["target"]) for e in json.loads(audit.stdout)]
    assert ("create token", f"token {token_id}") in actions and ("revoke token", f"token {token_id}") in actions


def test_owners_may_lower_a_time_limit_but_not_raise_it_nor_set_a_priority(cluster):
    alice = cluster.users["alice"]
    job_id = submit_as(cluster, alice, "--time=60")
    with cluster.http(cluster.credential_of(alice)) as http:
        raised = http.post(f"/jobs/{job_id}/update", json={"time_limit_s": 7200})
        assert raised.status_code == 403 and "raise a time limit" in raised.json()["detail"]
        assert http.post(f"/jobs/{job_id}/update", json={"priority": 5}).status_code == 403
        assert http.post(f"/jobs/{job_id}/update", json={"time_limit_s": 1800}).status_code == 200
    with cluster.http() as http:
        assert http.get(f"/jobs/{job_id}").json()["time_limit_s"] == 1800
        assert http.post(f"/jobs/{job_id}/update", json={"time_limit_s": 7200}).status_code == 200  # an admin may
