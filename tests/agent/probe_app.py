"""A tiny HTTP server for probe tests: a service replica's stand-in.

Listens on $PORT (after `--delay` seconds: a model that loads), answers GET /NAME with the status written in
the file NAME of the directory `--status` names (200 while there is none) and the text "hello from <pid>"."""
from __future__ import annotations

import argparse
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--status", type=Path, default=None)
    parser.add_argument("--lifetime", type=float, default=120.0)  # a test that failed half-way leaves no server
    options = parser.parse_args()
    threading.Timer(options.lifetime, os._exit, [0]).start()
    time.sleep(options.delay)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            status = 200
            written = None if options.status is None else options.status / self.path.strip("/")
            if written is not None and written.is_file():
                status = int(written.read_text().strip() or 200)
            body = f"hello from {os.getpid()}\n".encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass

    ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()


if __name__ == "__main__":
    main()
