"""Auth-socket credentials reused across the command helper's calls (corral.slurm.common.credential_reuse): reused
within their lifetime only, from the same socket only, by their own uid only; one the controller refuses is
renewed once and the request sent once more (never acted on twice); a helper started again asks again.
Against the real controller (build_app over HTTP, its real auth socket), reached through a real relay socket
that counts the credentials asked for."""
from __future__ import annotations

import base64
import contextlib
import json
import os
import pwd
import secrets
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.controller.__main__ import build_app
from corral.controller.auth import AuthSettings
from corral.engine.config import EngineConfig
from corral.slurm import front
from corral.slurm.common import credential_reuse
from corral.slurm.common.command import connect
from corral.slurm.common.credential_reuse import REUSE_MARGIN_S, Reuse, socket_identity
from corral.slurm.common.target import resolve_target
from corral.store import Store
from tests.cli.standin import ServerThread

from .commands import script

SECRET = "frontfast-reuse-secret"
NODE = {"address": "127.0.0.1", "gpus": [], "cpus": 16, "mem_mib": 64000}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs a controller whose auth socket serves root")


class CountingRelay:
    """A Unix socket that hands each connection's answer from the controller's auth socket: what a client
    asks of it is counted (the kernel still names the caller: the relay runs as the same user)."""

    def __init__(self, path: Path, target: Path) -> None:
        self.path, self.target, self.asked = path, target, 0
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(str(path))
        self._server.listen(16)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn, socket.socket(socket.AF_UNIX) as upstream:
                upstream.connect(str(self.target))
                answer = b"".join(iter(lambda: upstream.recv(4096), b""))
                self.asked += 1
                conn.sendall(answer)

    def replace(self) -> None:
        """The socket made anew at the same path: what a controller started again does."""
        self._server.close()
        os.unlink(self.path)
        time.sleep(0.01)  # a change time of its own
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(str(self.path))
        self._server.listen(16)
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        self._server.close()


class AuthCluster:
    def __init__(self, url: str, root: Path, relay: CountingRelay, cluster_file: Path) -> None:
        self.url, self.root, self.relay, self.cluster_file = url, root, relay, cluster_file

    def env(self, **extra: str) -> dict[str, str]:
        """Root's login environment: no token, no secret; the cluster (and its auth socket) from cluster.json.
        This interpreter's start variables (LANG: Python sets LC_CTYPE without it) name the same helper."""
        started = {name: os.environ[name] for name in front.START_VARIABLES if name in os.environ}
        return {**started, "PATH": os.environ["PATH"], "HOME": str(self.root), "LOGNAME": "root", "USER": "root",
                "XDG_CONFIG_HOME": str(self.root / "no-config"), "CORRAL_SYSTEM_CLUSTER_FILE": str(self.cluster_file),
                **extra}


@pytest.fixture(scope="module")
def auth_cluster(tmp_path_factory) -> Iterator[AuthCluster]:
    import httpx

    root = Path(tempfile.mkdtemp(prefix="corral-frontfast-reuse-"))
    (root / "run").mkdir()
    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('db') / 'corral.db'}")
    auth = AuthSettings(socket=str(root / "run" / "auth.sock"))
    try:
        with ServerThread(build_app(EngineConfig(), store, SECRET, auth=auth), lifespan="on") as server:
            relay = CountingRelay(root / "run" / "relay.sock", root / "run" / "auth.sock")
            cluster_file = root / "cluster.json"
            cluster_file.write_text(json.dumps({"url": server.url, "auth_socket": str(relay.path)}))
            headers = {"Authorization": f"Bearer {SECRET}"}
            with httpx.Client(base_url=server.url + "/api/v1", headers=headers, trust_env=False) as http:
                assert http.post("/agents/register", json={"node": "node1", **NODE}).status_code == 200
            yield AuthCluster(server.url, root, relay, cluster_file)
            relay.close()
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=True)


@pytest.fixture
def kept(monkeypatch) -> Reuse:
    """A Reuse installed in this process, as the command helper installs its own; gone afterwards."""
    monkeypatch.setattr(credential_reuse, "_active", [])
    reuse = Reuse()
    credential_reuse.install(reuse)
    return reuse


def test_a_credential_is_reused_within_its_lifetime_and_only_where_asked(auth_cluster, kept):
    env, relay = auth_cluster.env(), auth_cluster.relay
    before = relay.asked
    first, second = resolve_target(env, reuse=True), resolve_target(env, reuse=True)
    assert first.secret and first.secret.startswith("cu1.")
    assert (first.reused_from, second.reused_from) == (None, str(relay.path))
    assert second.secret == first.secret and relay.asked == before + 1
    unasked = resolve_target(env)  # the Typer command's path: no reuse, a fresh credential (its own nonce)
    assert unasked.secret != first.secret and unasked.reused_from is None and relay.asked == before + 2


def test_one_that_would_expire_soon_is_not_reused(auth_cluster, kept):
    env, path = auth_cluster.env(), str(auth_cluster.relay.path)
    credential = resolve_target(env, reuse=True).secret
    assert credential_reuse.own_expiry(credential) == pytest.approx(time.time() + 300, abs=5)  # the default TTL
    kept.known[socket_identity(path)] = (credential, time.time() + REUSE_MARGIN_S - 1)
    assert kept.credential(path) is None and not kept.known  # dropped
    fresh = resolve_target(env, reuse=True)
    assert fresh.reused_from is None and fresh.secret != credential


def test_a_socket_made_anew_is_asked_again(auth_cluster, kept):
    env, relay = auth_cluster.env(), auth_cluster.relay
    credential = resolve_target(env, reuse=True).secret
    relay.replace()
    again = resolve_target(env, reuse=True)
    assert again.reused_from is None and again.secret != credential


def _forged(uid: int) -> str:
    """A well-formed user credential this controller never signed (as one signed with a key it no longer has)."""
    now = int(time.time())
    payload = f"root:{uid}:0:{now}:{now + 300}:{secrets.token_hex(8)}".encode()
    return f"cu1.{base64.urlsafe_b64encode(payload).rstrip(b'=').decode()}.{'A' * 43}"


def test_a_refused_credential_is_renewed_once_and_the_job_submitted_once(auth_cluster, kept):
    path = str(auth_cluster.relay.path)
    forged = _forged(os.getuid())
    kept.known[socket_identity(path)] = (forged, time.time() + 300)
    controller = connect(auth_cluster.env())
    assert controller.reused_from == path
    name = f"frontfast-once-{secrets.token_hex(3)}"
    reply = controller.submit({"workdir": "/tmp", "user": "root", "argv": ["true"], "hold": True, "name": name})
    renewed = kept.credential(path)
    assert renewed is not None and renewed != forged  # the refused one is forgotten, the fresh one kept
    assert controller.reused_from is None  # renewed once; a second refusal would be reported, not retried
    named = [job for job in connect(auth_cluster.env()).jobs(include_finished=True) if job["name"] == name]
    assert [job["id"] for job in named] == [reply["job_id"]]


def test_another_uids_credential_is_never_kept_nor_given(auth_cluster, kept):
    path = str(auth_cluster.relay.path)
    identity = socket_identity(path)
    kept.remember(path, _forged(os.getuid() + 4242))
    assert not kept.known
    read_end, write_end = os.pipe()
    reporter = Reuse(report_fd=write_end)
    reporter._report(credential_reuse.REMEMBER, identity, _forged(os.getuid() + 4242))  # as a child would
    os.set_blocking(read_end, False)
    kept.take_reports(read_end)
    assert not kept.known
    os.close(read_end)
    os.close(write_end)


def test_a_process_that_became_another_user_is_not_given_the_kept_one(auth_cluster, kept):
    """Kept by root, asked for by a process that is another user now: not given."""
    name = f"frontfast{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name], check=True)
    try:
        user = pwd.getpwnam(name)
        path = str(auth_cluster.relay.path)
        resolve_target(auth_cluster.env(), reuse=True)
        assert kept.credential(path) is not None
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(user.pw_gid)
                os.setuid(user.pw_uid)
                os.write(write_end, b"none" if kept.credential(path) is None else b"given")
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            said = pipe.read()
        os.waitpid(pid, 0)
        assert said == b"none"
    finally:
        subprocess.run(["userdel", name], check=False)


def _helper_pids(path: str) -> list[int]:
    from .test_command_helper import _helper_pids as pids

    return pids(path)


@pytest.mark.slow
def test_through_the_helper_calls_reuse_it_and_a_restarted_helper_asks_again(auth_cluster, tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = auth_cluster.env(XDG_RUNTIME_DIR=str(runtime), **{front.HELPER_SWITCH: "1"})
    path = front.socket_path(env)
    relay = auth_cluster.relay

    def squeue() -> None:
        done = subprocess.run([str(script("squeue")), "-h"], env=env, capture_output=True, text=True, timeout=60,
                              check=False, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr

    try:
        squeue()  # starts the helper
        from .test_command_helper import _wait_for_helper

        _wait_for_helper(path)
        before = relay.asked
        for _ in range(10):
            squeue()
        # Each child starts with what the helper knew when the child before it took its call: the first two
        # children ask, the rest reuse. 10 asked without the helper's reuse.
        assert relay.asked - before <= 3
        for pid in _helper_pids(path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 15)
        deadline = time.monotonic() + 20
        while _helper_pids(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        restarted = relay.asked
        squeue()  # no helper: this call runs in its own process and starts a new one
        _wait_for_helper(path)
        squeue()
        assert relay.asked - restarted >= 2  # nothing kept across helpers: asked again
    finally:
        for pid in _helper_pids(path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 15)
