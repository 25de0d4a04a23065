"""Requests are bounded before they are read (issue 21, item 5): a real controller process on a real socket,
its resident memory read with psutil. Bodies: authenticated before a byte is read (401), capped by route
(413, declared or counted), read within a deadline (408); connections: an idle one closes, trickled
headers get 408; legitimate requests (a 4 MiB script, an agent's long poll) pass."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from corral.controller import credentials as cred
from corral.controller.ratelimit import RATE_LIMITED
from corral.limits import SCRIPT_MAX_BYTES
from corral.protocol import API_PREFIX, EPOCH_HEADER
from tests.e2e.harness import free_port

SECRET = "bodies-gate-secret"
IDLE_S, HEADER_S, BODY_S = 1, 1, 2
MIB = 1024 * 1024
JOB_CAP = 32 * MIB  # [http] max_body_mib's default

pytestmark = pytest.mark.slow


class Controller:
    def __init__(self, process: subprocess.Popen, port: int) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(base_url=self.url + API_PREFIX, headers={"Authorization": f"Bearer {SECRET}"},
                                 timeout=30, trust_env=False)

    def rss_mib(self) -> float:
        return psutil.Process(self.process.pid).memory_info().rss / MIB

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.settimeout(30)
        return sock

    def audit(self, outcome: str) -> list[dict]:
        entries = self.http.get("/audit", params={"limit": 100_000}).json()
        return [e for e in entries if e["outcome"] == outcome]


@pytest.fixture(scope="module")
def controller(tmp_path_factory) -> Iterator[Controller]:
    root = tmp_path_factory.mktemp("bodies-gate")
    (root / "secret").write_text(SECRET + "\n")
    (root / "corral.toml").write_text(
        f"[http]\nidle_timeout_s = {IDLE_S}\nheader_timeout_s = {HEADER_S}\nbody_timeout_s = {BODY_S}\n"
        # Users (not the service credential the other tests use) get 3 requests, and no refill for an hour.
        "[ratelimit]\nenabled = true\nbucket_size = 3\nrefill_rate = 1\nrefill_period_s = 3600\n")
    port = free_port()
    log = (root / "controller.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "corral.controller", "--listen", f"127.0.0.1:{port}", "--db",
         f"sqlite:///{root / 'corral.db'}", "--secret-file", str(root / "secret"), "--config",
         str(root / "corral.toml")], stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    live = Controller(process, port)
    try:
        _wait_healthy(live, process, root)
        reply = live.http.post("/agents/register", json={"node": "node1", "address": "127.0.0.1", "gpus": [],
                                                         "cpus": 4, "mem_mib": 4000})
        assert reply.status_code == 200, reply.text
        yield live
    finally:
        live.http.close()
        process.terminate()
        process.wait(timeout=20)
        log.close()


def _wait_healthy(live: Controller, process: subprocess.Popen, root: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, (root / "controller.log").read_text()
        try:
            if httpx.get(live.url + "/health", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("the controller did not become healthy: " + (root / "controller.log").read_text())


def _head(path: str, length: int | None, credential: str | None = SECRET) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: controller", "Content-Type: application/json"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    if credential:
        lines.append(f"Authorization: Bearer {credential}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the controller sent until it closed the connection (a reset after it is a close too:
    it closes with the client's unread bytes in its buffer)."""
    received = b""
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return received
        if not data:
            return received
        received += data


def _read_response(sock: socket.socket) -> bytes:
    """One whole response (its head and its Content-Length of body), the connection left open."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                  if line.startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def _pour(sock: socket.socket, chunks: Iterator[bytes]) -> threading.Thread:
    """Send in a thread until the controller stops listening (it answers and closes meanwhile)."""

    def pour() -> None:
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        except OSError:
            pass

    thread = threading.Thread(target=pour, daemon=True)
    thread.start()
    return thread


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def _detail(reply: bytes) -> str:
    return json.loads(reply.partition(b"\r\n\r\n")[2])["detail"]


def test_a_200_mib_body_without_a_credential_is_refused_unread(controller: Controller) -> None:
    before = controller.rss_mib()
    for _ in range(2):  # before the gate: 86 -> 488 MiB, then 888 MiB after the second
        sock = controller.connect()
        sock.sendall(_head(f"{API_PREFIX}/jobs", 200 * MIB, credential=None))
        sender = _pour(sock, (b"x" * 65536 for _ in range(200 * 16)))
        reply = _read_until_closed(sock)
        sender.join(timeout=30)
        sock.close()
        assert _status(reply) == 401, reply
        assert _detail(reply) == "not authenticated: no credential (Authorization: Bearer <credential>)"
        assert b"connection: close" in reply.lower()
    grown = controller.rss_mib() - before
    assert grown < 8, f"the controller's RSS grew by {grown:.1f} MiB"
    assert any(e["action"] == f"POST {API_PREFIX}/jobs" and "no credential" in e["detail"]
               for e in controller.audit("unauthenticated"))


def test_a_forged_credential_is_refused_before_the_body(controller: Controller) -> None:
    sock = controller.connect()
    sock.sendall(_head(f"{API_PREFIX}/agents/node1/events", 100 * MIB, credential="ct1.7.forged"))
    reply = _read_until_closed(sock)  # nothing of the body was sent: the answer cannot wait for it
    sock.close()
    assert _status(reply) == 401
    assert _detail(reply) == "not authenticated: token 7 is unknown or its secret is wrong"


def test_a_declared_10_gib_body_gets_413_at_once_and_the_connection_closes(controller: Controller) -> None:
    sock = controller.connect()
    started = time.monotonic()
    sock.sendall(_head(f"{API_PREFIX}/jobs", 10 * 1024 * MIB))
    reply = _read_until_closed(sock)
    sock.close()
    assert time.monotonic() - started < 2
    assert _status(reply) == 413
    assert _detail(reply) == (f"the request body of 10,737,418,240 bytes is over this route's limit of "
                              f"{JOB_CAP:,} bytes")
    assert any(e["who"] == "root" and e["action"] == f"POST {API_PREFIX}/jobs" and "10,737,418,240" in e["detail"]
               for e in controller.audit("denied"))


def test_a_small_route_has_a_small_cap(controller: Controller) -> None:
    sock = controller.connect()
    sock.sendall(_head(f"{API_PREFIX}/tokens", 2 * MIB))
    reply = _read_until_closed(sock)
    sock.close()
    assert _status(reply) == 413
    assert _detail(reply).endswith("over this route's limit of 1,048,576 bytes")


def test_a_chunked_body_is_counted_and_stopped_at_the_cap(controller: Controller) -> None:
    before = controller.rss_mib()
    sock = controller.connect()
    sock.sendall(_head(f"{API_PREFIX}/jobs", None))
    piece = b"%x\r\n%s\r\n" % (MIB, b"y" * MIB)
    sender = _pour(sock, (piece for _ in range(200)))
    reply = _read_until_closed(sock)
    sender.join(timeout=30)
    sock.close()
    assert _status(reply) == 413
    assert _detail(reply) == f"the request body is over this route's limit of {JOB_CAP:,} bytes"
    # The body read up to the cap is let go with the refusal.
    assert controller.rss_mib() - before < JOB_CAP / MIB + 16


def test_a_trickled_body_is_cut_after_the_body_timeout(controller: Controller) -> None:
    body = json.dumps({"workdir": "/tmp", "user": "root", "argv": ["true"]}).encode()
    jobs_before = controller.http.get("/jobs", params={"all": "true"}).json()
    sock = controller.connect()
    sock.sendall(_head(f"{API_PREFIX}/jobs", len(body)))
    sender = _pour(sock, (body[i:i + 1] for i in range(len(body)) if time.sleep(0.5) is None))
    started = time.monotonic()
    reply = _read_until_closed(sock)
    sock.close()
    sender.join(timeout=30)
    assert BODY_S - 0.1 < time.monotonic() - started < BODY_S + 2
    assert _status(reply) == 408
    assert _detail(reply).startswith(f"the request body did not arrive within {BODY_S} s (")
    assert _detail(reply).endswith(f" of {len(body)} bytes came)")
    assert controller.http.get("/jobs", params={"all": "true"}).json() == jobs_before  # nothing half-applied
    assert any(e["who"] == "root" and e["detail"] == _detail(reply) for e in controller.audit("denied"))


@pytest.mark.parametrize("first", [b"", b"GET /health HTTP/1.1\r\nHost: controller\r\n\r\n"],
                         ids=["new-connection", "after-a-response"])
def test_trickled_headers_are_cut_with_408(controller: Controller, first: bytes) -> None:
    """uvicorn alone: a new connection had no deadline, and after a response every byte cancelled its
    keep-alive timeout."""
    head = b"GET /health HTTP/1.1\r\nHost: controller\r\nX-Slow: " + b"a" * 200
    sock = controller.connect()
    if first:
        sock.sendall(first)
        assert _read_response(sock).startswith(b"HTTP/1.1 200 OK\r\n")
    sender = _pour(sock, (head[i:i + 1] for i in range(len(head)) if time.sleep(0.1) is None))
    started = time.monotonic()
    reply = _read_until_closed(sock)
    sock.close()
    sender.join(timeout=30)
    assert HEADER_S - 0.1 < time.monotonic() - started < HEADER_S + 2
    assert reply.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert _detail(reply) == f"the request's headers did not arrive within {HEADER_S} s"


def test_an_idle_connection_is_closed(controller: Controller) -> None:
    sock = controller.connect()  # a new connection that sends nothing
    started = time.monotonic()
    assert _read_until_closed(sock) == b""
    assert IDLE_S - 0.1 < time.monotonic() - started < IDLE_S + 2
    sock.close()
    sock = controller.connect()  # and one idle after a response
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: controller\r\n\r\n")
    started = time.monotonic()
    reply = _read_until_closed(sock)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n") and reply.endswith(b"}")
    assert IDLE_S - 0.1 < time.monotonic() - started < IDLE_S + 2


def test_a_4_mib_script_is_still_submitted(controller: Controller) -> None:
    script = "#!/bin/sh\n" + "echo 'a line of a big generated script'\n" * ((SCRIPT_MAX_BYTES - 10) // 40)
    assert len(script) <= SCRIPT_MAX_BYTES
    reply = controller.http.post("/jobs", json={"workdir": "/tmp", "user": "root", "script": script,
                                                "env": {f"V{i}": "v" * 1000 for i in range(1500)}})
    assert reply.status_code == 201, reply.text[:300]
    job = controller.http.get(f"/jobs/{reply.json()['job_id']}").json()
    assert job["state"] == "PENDING"


def test_a_long_poll_outlives_the_idle_timeout(controller: Controller) -> None:
    registered = controller.http.post("/agents/register", json={"node": "node2", "address": "127.0.0.1",
                                                                "gpus": [], "cpus": 4, "mem_mib": 4000})
    started = time.monotonic()
    reply = controller.http.get("/agents/node2/commands", params={"after": 10**9, "wait_s": IDLE_S + 2},
                                headers={EPOCH_HEADER: registered.json()["epoch"]})
    assert reply.status_code == 200, reply.text
    assert time.monotonic() - started >= IDLE_S + 1.9
    assert reply.json()["commands"] == []


def test_a_malformed_join_token_is_refused_before_the_body(controller: Controller) -> None:
    sock = controller.connect()
    sock.sendall(_head(f"{API_PREFIX}/agents/join", 1000, credential="cjt1.x.y"))
    reply = _read_until_closed(sock)
    sock.close()
    assert _status(reply) == 401
    assert _detail(reply) == "not authenticated: malformed join token"


def test_a_user_over_the_rate_limit_gets_429_before_the_body(controller: Controller) -> None:
    alice = cred.issue_user(cred.signing_key(SECRET), "alice", 4242, 4242, time.time(), 300)
    http = httpx.Client(base_url=controller.url + API_PREFIX, headers={"Authorization": f"Bearer {alice}"},
                        timeout=30, trust_env=False)
    with http:
        statuses = [http.post("/jobs", json={"workdir": "/tmp", "user": "alice", "argv": ["true"]}).status_code
                    for _ in range(4)]
    # One token a request, not one each for the gate and the guard.
    assert statuses[-1] == 429 and 429 not in statuses[:3], statuses
    sock = controller.connect()
    sock.sendall(_head(f"{API_PREFIX}/jobs", 10 * MIB, credential=alice))  # and not a byte of the body
    reply = _read_until_closed(sock)
    sock.close()
    assert _status(reply) == 429
    assert _detail(reply).startswith(f"{RATE_LIMITED}: user alice sent more than 3 requests at once")
    assert b"retry-after: " in reply.lower() and b"connection: close" in reply.lower()


@pytest.mark.parametrize("framing", [b"Content-Length: 2\r\nContent-Length: 200", b"Content-Length: 2x",
                                     b"Content-Length: 2\r\nTransfer-Encoding: chunked"],
                         ids=["doubled", "malformed", "length-and-chunked"])
def test_ambiguous_body_framing_gets_400_from_the_parser(controller: Controller, framing: bytes) -> None:
    """The body gate trusts the declared length it reads (_declared_length): the HTTP parser must have
    refused a request whose body's end two readers could place differently (request smuggling)."""
    before = len(controller.http.get("/jobs").json())
    sock = controller.connect()
    sock.sendall(b"POST " + API_PREFIX.encode() + b"/jobs HTTP/1.1\r\nHost: controller\r\n"
                 b"Authorization: Bearer " + SECRET.encode() + b"\r\n" + framing + b"\r\n\r\n{}")
    reply = _read_until_closed(sock)
    sock.close()
    assert _status(reply) == 400
    assert len(controller.http.get("/jobs").json()) == before  # nothing reached the routes


def test_the_controller_serves_with_httptools_on_uvloop() -> None:
    """The stack decision 0023 chose (llhttp's C parser on libuv), not uvicorn's pure-Python fallbacks."""
    from corral.controller.http_server import TimedHttpToolsProtocol, server_config

    config = server_config(object(), "127.0.0.1", 0, IDLE_S, HEADER_S)
    assert issubclass(config.http, TimedHttpToolsProtocol)  # type: ignore[arg-type]
    assert config.loop == "uvloop"
    assert (config.http.idle_timeout_s, config.http.header_timeout_s) == (IDLE_S, HEADER_S)  # type: ignore[union-attr]


def test_headers_past_16_kib_get_431_before_their_deadline(controller: Controller) -> None:
    """llhttp holds an incomplete head without limit (h11 stopped at 16 KiB): without a cap of corral's own,
    one connection could fill the controller's memory within the header deadline."""
    sock = controller.connect()
    started = time.monotonic()
    sender = _pour(sock, iter([b"GET /health HTTP/1.1\r\nHost: controller\r\nX-Big: "] + [b"a" * 4096] * 64))
    reply = _read_until_closed(sock)
    sock.close()
    sender.join(timeout=30)
    assert time.monotonic() - started < HEADER_S
    assert _status(reply) == 431
    assert _detail(reply) == "the request's headers are over 16,384 bytes"
    whole = controller.connect()  # a head of 12 KiB is still served
    whole.sendall(b"GET /health HTTP/1.1\r\nHost: controller\r\nX-Big: " + b"a" * 12000 + b"\r\n\r\n")
    assert _read_response(whole).startswith(b"HTTP/1.1 200 OK\r\n")
    whole.close()
