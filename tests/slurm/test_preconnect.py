"""A connection to the controller made ahead of the call (corral.slurm.common.preconnect): used for the call's
first request when it is still open, replaced when the controller closed it, never written on twice. A real
controller (its idle deadline closes the connection), a real HTTP stand-in that counts connections, and the
helper's waiting child seen holding one."""
from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from pathlib import Path

import pytest

from corral.slurm.common import credential_reuse, preconnect
from corral.slurm.common.credential_reuse import Reuse
from corral.slurm.common.http import Controller, Unreachable

IDLE_S = 1  # the controller's [http] idle_timeout_s: its shortest


@pytest.fixture(autouse=True)
def nothing_ahead():
    yield
    for sock, _opened in preconnect._ahead.values():
        sock.close()
    preconnect._ahead.clear()


class CountingServer:
    """A plain HTTP/1.1 server on a thread: answers every request 200 with `{}` and closes; counts the
    connections it accepted and the requests it read. `close_idle`: connections are closed at once unread
    (as the controller's idle deadline does), until a request is expected."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        self.close_idle = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.listener.accept()
            self.connections += 1
            if self.close_idle:
                conn.close()
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            if data:
                self.requests.append(data.split(b"\r\n", 1)[0])
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n"
                             b"connection: close\r\n\r\n{}")


def _settled(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_the_request_goes_on_the_connection_made_ahead():
    server = CountingServer()
    preconnect.connect_ahead("127.0.0.1", server.port, (socket.AF_INET, "127.0.0.1", server.port))
    assert _settled(lambda: server.connections == 1)
    assert Controller(f"http://127.0.0.1:{server.port}").health() == {}
    assert server.connections == 1 and server.requests == [b"GET /api/v1/health HTTP/1.1"]
    Controller(f"http://127.0.0.1:{server.port}").health()  # the next request connects itself
    assert server.connections == 2


def test_a_connection_made_ahead_serves_only_its_own_host_and_port():
    server = CountingServer()
    other = CountingServer()
    preconnect.connect_ahead("127.0.0.1", server.port, (socket.AF_INET, "127.0.0.1", server.port))
    Controller(f"http://localhost:{other.port}").health()
    Controller(f"http://localhost:{server.port}").health()  # the same port under another name: not it
    assert _settled(lambda: server.connections == 2) and len(server.requests) == 1
    assert other.requests == [b"GET /api/v1/health HTTP/1.1"]


def test_an_old_connection_made_ahead_is_not_used(monkeypatch):
    server = CountingServer()
    monkeypatch.setattr(preconnect, "FRESH_S", 0.05)
    preconnect.connect_ahead("127.0.0.1", server.port, (socket.AF_INET, "127.0.0.1", server.port))
    time.sleep(0.1)
    Controller(f"http://127.0.0.1:{server.port}").health()
    assert server.connections == 2 and len(server.requests) == 1


def test_a_connection_the_server_closed_unused_is_replaced_and_the_request_sent_once():
    server = CountingServer()
    server.close_idle = True
    preconnect.connect_ahead("127.0.0.1", server.port, (socket.AF_INET, "127.0.0.1", server.port))
    assert _settled(lambda: server.connections == 1)
    time.sleep(0.05)  # its close on its way
    server.close_idle = False
    assert Controller(f"http://127.0.0.1:{server.port}").health() == {}
    assert server.connections == 2 and server.requests == [b"GET /api/v1/health HTTP/1.1"]


def test_nothing_listening_ahead_leaves_the_request_to_connect_itself():
    server = CountingServer()
    port = server.port
    closed = socket.create_server(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()
    preconnect.connect_ahead("127.0.0.1", port, (socket.AF_INET, "127.0.0.1", dead_port))  # refused
    assert Controller(f"http://127.0.0.1:{port}").health() == {}
    assert server.connections == 1


@pytest.fixture(scope="module")
def idle_controller(tmp_path_factory):
    """A real controller that closes a connection with no request after IDLE_S."""
    from tests.e2e.harness import Cluster

    cluster = Cluster(tmp_path_factory.mktemp("frontlat-preconnect"), nodes=1, gpus=1,
                      config=f"kill_grace_s = 2\nnode_timeout_s = 15\n[http]\nidle_timeout_s = {IDLE_S}\n").start()
    yield cluster
    cluster.kill_controller()
    cluster.stop()


@pytest.mark.slow
def test_a_connection_the_controller_closed_is_replaced_and_the_job_submitted_once(idle_controller, monkeypatch):
    monkeypatch.setattr(preconnect, "FRESH_S", 30.0)  # so that the controller's own idle close is what is met
    port = int(idle_controller.url.rsplit(":", 1)[1])
    preconnect.connect_ahead("127.0.0.1", port, (socket.AF_INET, "127.0.0.1", port))
    ahead, _ = preconnect._ahead[("127.0.0.1", port)]
    assert _settled(lambda: _closed_by_peer(ahead), timeout_s=IDLE_S + 5)
    controller = Controller(idle_controller.url, idle_controller.secret_file.read_text().strip())
    name = f"frontlat-once-{secrets.token_hex(3)}"
    reply = controller.submit({"workdir": "/tmp", "user": "root", "argv": ["true"], "hold": True, "name": name})
    named = [job for job in controller.jobs(include_finished=True) if job["name"] == name]
    assert [job["id"] for job in named] == [reply["job_id"]]


@pytest.mark.slow
def test_a_request_written_on_a_connection_made_ahead_is_never_sent_again(idle_controller, monkeypatch):
    """The connection breaks after the request went out on it: reported, not retried (it may have been acted
    on), even though it was made ahead."""
    port = int(idle_controller.url.rsplit(":", 1)[1])
    preconnect.connect_ahead("127.0.0.1", port, (socket.AF_INET, "127.0.0.1", port))
    ahead, _ = preconnect._ahead[("127.0.0.1", port)]
    real_recv = ahead.recv
    calls = []

    class Breaking:
        """The connection made ahead, whose answer is lost once the request is written."""

        def __getattr__(self, name):
            return getattr(ahead, name)

        def recv(self, size, flags=0):
            if flags:  # take()'s peek, before the request
                return real_recv(size, flags)
            calls.append(size)
            raise ConnectionResetError(104, "reset")

    preconnect._ahead[("127.0.0.1", port)] = (Breaking(), time.monotonic())  # type: ignore[assignment]
    controller = Controller(idle_controller.url, idle_controller.secret_file.read_text().strip())
    name = f"frontlat-lost-{secrets.token_hex(3)}"
    with pytest.raises(Unreachable):
        controller.submit({"workdir": "/tmp", "user": "root", "argv": ["true"], "hold": True, "name": name})
    assert calls == [65536]
    assert _settled(lambda: len([j for j in controller.jobs(include_finished=True) if j["name"] == name]) == 1)


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False


def test_a_call_reports_its_controller_to_the_helper_once():
    """What the waiting child is told to connect to: the address the last call reached, sent only when new."""
    server = CountingServer()
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    child = Reuse(report_fd=write_end)
    credential_reuse.install(child)
    try:
        for _ in range(2):
            Controller(f"http://127.0.0.1:{server.port}").health()
        helper = Reuse()
        reported = os.read(read_end, 4096)
        assert reported.count(credential_reuse.CONTROLLER) == 1  # the second call's is not news
        os.write(write_end, reported)
        helper.take_reports(read_end)
        assert helper.controller == (("127.0.0.1", server.port), (socket.AF_INET, "127.0.0.1", server.port))
    finally:
        credential_reuse._active.clear()
        os.close(read_end)
        os.close(write_end)


@pytest.mark.slow
def test_the_helpers_waiting_child_holds_a_connection_to_the_last_calls_controller(slurm_cluster, tmp_path):
    from corral.slurm import front

    from .commands import command_env, run
    from .test_command_helper import _helper_pids, _wait_for_helper

    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = command_env(slurm_cluster.url, slurm_cluster.secret_file, XDG_RUNTIME_DIR=str(runtime))
    path = front.socket_path(env)
    try:
        run("squeue", "--version", env=env)  # starts the helper
        _wait_for_helper(path)
        assert run("squeue", env=env).code == 0  # a call that talks to the controller, through the helper
        port = int(slurm_cluster.url.rsplit(":", 1)[1])
        assert _settled(lambda: any(port in _tcp_peer_ports(pid) for pid in _helper_pids(path)))
    finally:
        for pid in _helper_pids(path):
            os.kill(pid, 15)


def _tcp_peer_ports(pid: int) -> set[int]:
    """The remote ports of the process's established TCP connections (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes and fields[3] == "01":  # ESTABLISHED
                ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports
