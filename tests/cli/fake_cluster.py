"""Stand-ins for `python -m corral.controller` and `python -m corral.agent`, for `corral up` tests.
Stdlib only, so they start in milliseconds.

    fake_cluster.py controller --listen H:P --secret-file F [ignored options...]
    fake_cluster.py agent --controller URL[,URL...] --secret-file F --node NAME [ignored options...]

The controller serves /health and /nodes, takes agent registrations and answers /cluster/stop (as if it
had one running job, which it requeued); an agent registers once and then waits for SIGTERM. Both record
their argv in $FAKE_CLUSTER_RECORD (one JSON line each)."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from corral.controller.credentials import issue_agent, signing_key

PREFIX = "/api/v1"


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def record(role: str, argv: list[str]) -> None:
    path = os.environ.get("FAKE_CLUSTER_RECORD")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps({"role": role, "argv": argv, "pid": os.getpid()}) + "\n")


def controller(argv: list[str]) -> None:
    secret = open(option(argv, "--secret-file")).read().strip()
    host, port = option(argv, "--listen").rsplit(":", 1)
    nodes: dict[str, dict] = {}

    class Handler(BaseHTTPRequestHandler):
        def reply(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorized(self, agent_node: str | None = None) -> bool:
            """The cluster secret; on the agent route, only the node's own agent credential."""
            expected = secret if agent_node is None else issue_agent(signing_key(secret), agent_node)
            if self.headers.get("Authorization") == f"Bearer {expected}":
                return True
            self.reply(401, {"detail": "bad credential"})
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path == PREFIX + "/health":
                self.reply(200, {"status": "ok", "cluster": "fake"})
            elif self.path == PREFIX + "/nodes" and self.authorized():
                self.reply(200, list(nodes.values()))

        def do_POST(self) -> None:  # noqa: N802
            if self.path == PREFIX + "/agents/register":
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.authorized(agent_node=body["node"]):
                    nodes[body["node"]] = {"name": body["node"], "state": "idle"}
                    self.reply(200, {"epoch": "e", "heartbeat_s": 1.0})
            elif self.path.startswith(PREFIX + "/cluster/stop") and self.authorized():
                self.reply(200, {"requeued": [1], "ended": [], "unconfirmed": [], "pending": 0})

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, int(port)), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever(poll_interval=0.05)


def agent(argv: list[str]) -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    secret = open(option(argv, "--secret-file")).read().strip()
    request = urllib.request.Request(
        option(argv, "--controller").split(",")[0] + PREFIX + "/agents/register",  # the first of several
        data=json.dumps({"node": option(argv, "--node")}).encode(),
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    while not stop:
        try:
            urllib.request.urlopen(request, timeout=2).read()
            break
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    while not stop:
        time.sleep(0.05)
    print("agent stopped by SIGTERM", flush=True)


if __name__ == "__main__":
    role, rest = sys.argv[1], sys.argv[2:]
    record(role, rest)
    {"controller": controller, "agent": agent}[role](rest)
