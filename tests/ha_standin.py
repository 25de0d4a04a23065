"""A stand-in for one controller of several, answering as the HA contract of issue 13 says a leader or a
standby does, over real HTTP on 127.0.0.1 (http.server in a thread).

A stand-in, not the real controller: the clients' leader-following is tested here before the controller
side (branch ha-ctl) exists; the end-to-end tests against real controllers come with it. The contract:
- a standby answers every request but `GET /api/v1/status` and the health check with HTTP 421,
  `{"detail": "not the leader: the leader is <url>", "leader": <url>|null}` and `X-Corral-Leader: <url>`
  when it knows the leader;
- `GET /api/v1/status` answers from every controller: role, epoch, pid, url, leader, controllers.
The leader here accepts submissions (counted) and answers the few reads the tests make."""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API = "/api/v1"


class ControllerStandIn:
    def __init__(self, role: str = "leader", leader: str | None = None, epoch: int = 1) -> None:
        self.role = role
        self.leader = leader  # what a standby names as the leader (None: an election is under way)
        self.epoch = epoch
        self.peers: list[dict] = []  # the `controllers` of its /status
        self.leader_header = True  # False: a 421 names the leader in its body only (a proxy dropped the header)
        self.drop_requests = False  # a leader that dies with the request read and not answered
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request received
        self.submissions: list[dict] = []
        self.secret: str | None = None  # when set, requests must carry it as their bearer token
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ControllerStandIn:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.standin = self  # type: ignore[attr-defined]
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def become_leader_in(self, delay_s: float) -> None:
        """An election that ends after `delay_s` with this controller leading."""
        def win() -> None:
            time.sleep(delay_s)
            self.role, self.leader = "leader", None
        threading.Thread(target=win, daemon=True).start()

    def status(self) -> dict:
        leader = self.url if self.role == "leader" else self.leader
        return {"role": self.role, "epoch": self.epoch, "pid": os.getpid(), "url": self.url, "leader": leader,
                "controllers": self.peers or [{"url": self.url, "role": self.role, "epoch": self.epoch,
                                               "pid": os.getpid(), "last_seen": time.time()}]}


def nothing_listening() -> str:
    """The URL of a port on which nothing listens: a controller that is down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _answer(self) -> None:
        standin: ControllerStandIn = self.server.standin
        path = self.path.partition("?")[0]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        standin.requests.append((self.command, path))
        if standin.secret and self.headers.get("Authorization") != f"Bearer {standin.secret}":
            return self._reply(401, {"detail": "bad credential"})
        if path == f"{API}/status":
            return self._reply(200, standin.status())
        if path == f"{API}/health":
            return self._reply(200, {"status": "ok", "cluster": "standin"})
        if standin.role != "leader":
            named = standin.leader
            headers = {"X-Corral-Leader": named} if named and standin.leader_header else {}
            return self._reply(421, {"detail": f"not the leader: the leader is {named or 'not known yet'}",
                                     "leader": named}, headers)
        if standin.drop_requests:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        if (self.command, path) == ("POST", f"{API}/jobs"):
            standin.submissions.append(json.loads(body))
            return self._reply(201, {"job_id": len(standin.submissions), "task_ids": []})
        if self.command == "GET" and path in (f"{API}/jobs", f"{API}/nodes", f"{API}/accounting"):
            return self._reply(200, [])
        return self._reply(404, {"detail": "Not Found"})

    do_GET = do_POST = do_DELETE = do_PUT = _answer

    def _reply(self, status: int, value: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, text in (headers or {}).items():
            self.send_header(name, text)
        self.end_headers()
        self.wfile.write(data)
