"""The small HTTP app bench/services.py serves as a corral service: each replica answers GET (or POST, its
body read and dropped) /?ms=N after N milliseconds (0 by default) with "<VERSION> <replica> <pid>", VERSION
from its environment, on $PORT. It writes its pid to pids/<replica>-<pid> in its working directory, so the
benchmark can kill -9 it. It dies at once on SIGTERM (no graceful shutdown): the worst case for a drain."""
from __future__ import annotations

import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the gateway's pooled connections expect

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        wait_ms = float(parse_qs(urlparse(self.path).query).get("ms", ["0"])[0])
        time.sleep(wait_ms / 1000)
        body = f"{os.environ.get('VERSION', '?')} {os.environ.get('CORRAL_REPLICA', '?')} {os.getpid()}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.do_GET()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


def main() -> None:
    pids = Path("pids")
    pids.mkdir(exist_ok=True)
    (pids / f"{os.environ.get('CORRAL_REPLICA', 'x')}-{os.getpid()}").write_text(str(os.getpid()))
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
