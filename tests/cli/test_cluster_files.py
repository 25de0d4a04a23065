"""Several clusters on one host (issue 21, item 2): the host's cluster.json, and a user's, stay the cluster
they describe while it runs (its auth socket listens); a cluster removes a file only if it is still its own."""
from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from corral.cli.config import (
    remove_system_cluster_file,
    write_cluster_file,
    write_system_cluster_file,
)
from corral.unix_auth_socket import SocketTaken, listening, serve


@contextmanager
def auth_socket(path: Path, listen: bool = True) -> Iterator[Path]:
    """A Unix socket bound at `path` (as a running cluster's auth socket), listening unless told not to."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    if listen:
        server.listen()
    try:
        yield path
    finally:
        server.close()
        path.unlink(missing_ok=True)


def env_of(tmp_path: Path) -> dict[str, str]:
    return {"CORRAL_SYSTEM_CLUSTER_FILE": str(tmp_path / "etc" / "cluster.json"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path)}


def test_listening_tells_a_served_socket_from_a_stale_or_bound_one(tmp_path):
    with auth_socket(tmp_path / "served.sock") as served:
        assert listening(str(served))
    assert not listening(str(served)), "gone"
    with auth_socket(tmp_path / "bound.sock", listen=False) as bound:
        assert bound.exists() and not listening(str(bound))
    stale = tmp_path / "stale.sock"
    stale.write_text("")
    assert not listening(str(stale))


def test_the_host_file_stays_a_running_clusters_and_the_second_gets_its_own_copy(tmp_path):
    env = env_of(tmp_path)
    system_file = Path(env["CORRAL_SYSTEM_CLUSTER_FILE"])
    with auth_socket(tmp_path / "first.sock") as first_socket:
        assert write_system_cluster_file("http://127.0.0.1:7001", first_socket, env, cluster_id="aaaa") == system_file
        instead = tmp_path / "run" / "7002" / "cluster.json"
        written = write_system_cluster_file("http://127.0.0.1:7002", tmp_path / "second.sock", env,
                                            cluster_id="bbbb", instead=instead)
        assert written == instead
        assert json.loads(system_file.read_text())["cluster_id"] == "aaaa"
        assert json.loads(instead.read_text()) == {"url": "http://127.0.0.1:7002",
                                                   "auth_socket": str(tmp_path / "second.sock"), "cluster_id": "bbbb"}
        assert oct(instead.stat().st_mode & 0o777) == "0o644"
        # The second stops: only its own copy goes; the host's file still serves the first.
        remove_system_cluster_file(system_file, "http://127.0.0.1:7002", "bbbb")
        remove_system_cluster_file(instead, "http://127.0.0.1:7002", "bbbb")
        assert json.loads(system_file.read_text())["cluster_id"] == "aaaa" and not instead.exists()
        assert write_system_cluster_file("http://127.0.0.1:7002", tmp_path / "second.sock", env,
                                         cluster_id="bbbb") is None, "without a place of its own: nowhere"
    # Once the first is gone (its socket no longer listens) its file is stale: the next cluster takes it.
    assert write_system_cluster_file("http://127.0.0.1:7003", tmp_path / "third.sock", env,
                                     cluster_id="cccc") == system_file
    remove_system_cluster_file(system_file, "http://127.0.0.1:7001", "aaaa")  # the first stopping late
    assert json.loads(system_file.read_text())["cluster_id"] == "cccc"
    remove_system_cluster_file(system_file, "http://127.0.0.1:7003", "cccc")
    assert not system_file.exists()
    assert sorted(p.name for p in system_file.parent.iterdir()) == [], "no lock file left behind"


def test_a_cluster_started_again_takes_its_own_file_back(tmp_path):
    env = env_of(tmp_path)
    system_file = Path(env["CORRAL_SYSTEM_CLUSTER_FILE"])
    with auth_socket(tmp_path / "first.sock") as first_socket:
        write_system_cluster_file("http://127.0.0.1:7001", first_socket, env, cluster_id="aaaa")
        assert write_system_cluster_file("http://127.0.0.1:7009", first_socket, env, cluster_id="aaaa") == system_file
    assert json.loads(system_file.read_text())["url"] == "http://127.0.0.1:7009"


def test_the_users_file_stays_a_running_clusters(tmp_path):
    env = env_of(tmp_path)
    with auth_socket(tmp_path / "first.sock") as first_socket:
        path = write_cluster_file("http://127.0.0.1:7001", tmp_path / "a" / "secret", env, first_socket,
                                  cluster_id="aaaa")
        assert path == tmp_path / "config" / "corral" / "cluster.json"
        assert write_cluster_file("http://127.0.0.1:7002", tmp_path / "b" / "secret", env, tmp_path / "b.sock",
                                  cluster_id="bbbb") is None
        assert json.loads(path.read_text())["secret_file"] == str(tmp_path / "a" / "secret")
    assert write_cluster_file("http://127.0.0.1:7002", tmp_path / "b" / "secret", env, tmp_path / "b.sock",
                              cluster_id="bbbb") == path
    assert json.loads(path.read_text())["cluster_id"] == "bbbb"


def test_an_auth_socket_served_by_another_running_process_is_never_taken_over(tmp_path):
    async def answer(uid: int, gid: int) -> str:
        return f"for {uid}"

    async def serve_once(path: Path) -> None:
        server = await serve(str(path), answer)
        server.close()
        await server.wait_closed()

    with auth_socket(tmp_path / "auth.sock") as served:
        with pytest.raises(SocketTaken, match=f"the auth socket {served} is served by another running process"):
            asyncio.run(serve_once(served))
        assert listening(str(served)), "the other server keeps it"
    stale = tmp_path / "stale.sock"
    with auth_socket(stale, listen=False):
        asyncio.run(serve_once(stale))  # bound by nobody listening: replaced


def test_a_controller_refuses_an_auth_socket_another_cluster_serves(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret-for-the-test\n")
    with auth_socket(tmp_path / "auth.sock") as served:
        result = subprocess.run(
            [sys.executable, "-m", "corral.controller", "--listen", "127.0.0.1:9", "--db",
             f"sqlite:///{tmp_path / 'corral.db'}", "--secret-file", str(secret), "--auth-socket", str(served)],
            capture_output=True, text=True, timeout=120)
        assert result.returncode == 2
        assert f"corral-controller: error: the auth socket {served} is served by another running process" \
            in result.stderr
