"""A small HTTP app the end-to-end service tests run as a replica (`python3 service_app.py`), on $PORT.

GET / answers `VERSION JOBID` (GET /slow too, after 0.5 s); GET /health answers 200, or 500 once a file
`sick-JOBID` exists in its working directory (a liveness failure on demand); GET /stream sends five
server-sent events, a token every 0.1 s (an LLM server's token stream, on a CPU). It writes its pid to
`pid-JOBID` so a test can kill it."""
from __future__ import annotations

import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

JOB = os.environ.get("SLURM_JOB_ID", "?")
VERSION = os.environ.get("VERSION", "v1")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/health":
            sick = Path(f"sick-{JOB}").exists()
            self._answer(500 if sick else 200, b"sick\n" if sick else b"ok\n")
        elif self.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            for index in range(5):
                self.wfile.write(f"data: token{index} {JOB}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.1)
        else:
            if self.path == "/slow":
                time.sleep(0.5)  # a model's forward pass: requests pile up in flight under load
            self._answer(200, f"{VERSION} {JOB}\n".encode())

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    Path(f"pid-{JOB}").write_text(str(os.getpid()))
    print(f"serving {VERSION} as job {JOB} on port {os.environ['PORT']}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
