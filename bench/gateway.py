"""The gateway's cost, measured in one run on loopback: a small HTTP backend (tests/gateway/backend.py, one
aiohttp process answering 13 bytes at /hello) reached

- directly,
- through plain nginx (Debian's, `worker_processes 1`, upstream keep-alive, `proxy_buffering off`: the
  lower bound of what a generated-config proxy would cost; skipped with a message where nginx is absent),
- through the corral gateway (`corral.gateway.server.Gateway`, its own process, one static route, no
  credential check: a public service).

For each target: p50/p99 latency at concurrency 1 (`--serial` requests) and requests/s with p50/p99 at
concurrency `--concurrency` (`--requests` requests), after a warm-up, in `--rounds` rounds that interleave the
targets (latencies pooled over the rounds, requests/s the median round's), from one load generator (aiohttp, in this
process: on a small machine it is itself a bottleneck, so the figures compare the targets under the same
generator rather than state each one's ceiling). The load is bounded: it stops by itself.

    .venv/bin/python bench/gateway.py [--rounds 3] [--serial 500] [--requests 2000] [--concurrency 16] [--json F]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.gateway.harness import Backend  # noqa: E402

NGINX_CONF = """worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy; fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
  upstream web {{ server {backend}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location /s/web/ {{
      proxy_pass http://web/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def wait_answering(url: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(url) as reply:
                    if reply.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} does not answer")
            await asyncio.sleep(0.1)


async def drive(url: str, requests: int, concurrency: int) -> tuple[list[float], float, int]:
    """Latencies (s), wall time (s) and failures of `requests` GETs by `concurrency` workers."""
    latencies: list[float] = []
    failures = 0
    left = requests
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker() -> None:
            nonlocal left, failures
            while left > 0:
                left -= 1
                start = time.perf_counter()
                try:
                    async with session.get(url) as reply:
                        await reply.read()
                        ok = reply.status == 200
                except aiohttp.ClientError:
                    ok = False
                latencies.append(time.perf_counter() - start)
                failures += not ok

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - began
    return latencies, wall, failures


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(url: str, serial: int, requests: int, concurrency: int) -> dict:
    """One round against one target: serial latencies, and a loaded run's latencies and rate."""
    await drive(url, 200, concurrency)  # warm-up: connections, caches
    one, _, failed_one = await drive(url, serial, 1)
    many, wall, failed_many = await drive(url, requests, concurrency)
    return {"serial": one, "loaded": many, "rps": requests / wall, "failures": failed_one + failed_many}


def summary(name: str, rounds: list[dict]) -> dict:
    """Percentiles over every round's latencies pooled; requests/s the median round's."""
    one = [x for r in rounds for x in r["serial"]]
    many = [x for r in rounds for x in r["loaded"]]
    return {"target": name, "p50_ms": round(statistics.median(one) * 1000, 3),
            "p99_ms": round(percentile(one, 0.99) * 1000, 3),
            "loaded_rps": round(statistics.median(r["rps"] for r in rounds), 1),
            "loaded_p50_ms": round(statistics.median(many) * 1000, 3),
            "loaded_p99_ms": round(percentile(many, 0.99) * 1000, 3),
            "failures": sum(r["failures"] for r in rounds)}


def start_nginx(workdir: Path, backend: str) -> tuple[subprocess.Popen | None, str | None, str]:
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if binary is None:
        return None, None, "nginx is not installed (apt-get install nginx): plain nginx skipped"
    port = free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=workdir, backend=backend, port=port))
    process = subprocess.Popen([binary, "-p", str(workdir), "-c", str(conf), "-g", "daemon off;"])
    version = subprocess.run([binary, "-v"], capture_output=True, text=True).stderr.strip()
    return process, f"http://127.0.0.1:{port}/s/web/hello", version


def start_gateway(backend: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, __file__, "--serve-gateway", backend, "--port", str(port)],
                               cwd=ROOT)
    return process, f"http://127.0.0.1:{port}/s/web/hello"


async def serve_gateway(backend: str, port: int) -> None:
    from corral.gateway.routes import Endpoint, ServiceRoute
    from corral.gateway.server import Gateway
    from corral.gateway.sources import StaticSource

    gateway = Gateway(StaticSource(ServiceRoute("web", (Endpoint(backend),), public=True)), None)
    await gateway.start("127.0.0.1", port)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await gateway.stop()


def serve_httpx_candidate(backend: str, port: int) -> None:
    """The other Python candidate weighed in decision 0018, at its most favourable: uvicorn + Starlette
    receiving, httpx forwarding, the body read whole (no streaming, no headers copied, no metrics)."""
    import httpx
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    client = httpx.AsyncClient(base_url=f"http://{backend}", limits=httpx.Limits(max_keepalive_connections=64))

    async def forward(request: Request) -> Response:
        reply = await client.get("/" + request.path_params["tail"])
        return Response(reply.content, status_code=reply.status_code)

    app = Starlette(routes=[Route("/s/web/{tail:path}", forward)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start_httpx_candidate(backend: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, __file__, "--serve-httpx", backend, "--port", str(port)], cwd=ROOT)
    return process, f"http://127.0.0.1:{port}/s/web/hello"


def stop(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serial", type=int, default=500)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--httpx-candidate", action="store_true",
                        help="also measure a minimal uvicorn + Starlette + httpx proxy (decision 0018)")
    parser.add_argument("--serve-gateway", metavar="BACKEND", help=argparse.SUPPRESS)
    parser.add_argument("--serve-httpx", metavar="BACKEND", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_gateway:
        asyncio.run(serve_gateway(args.serve_gateway, args.port))
        return
    if args.serve_httpx:
        serve_httpx_candidate(args.serve_httpx, args.port)
        return
    with Backend("bench") as backend, tempfile.TemporaryDirectory(prefix="gateway-bench-nginx-") as tmp:
        nginx, nginx_url, nginx_note = start_nginx(Path(tmp), backend.address)
        gateway, gateway_url = start_gateway(backend.address)
        candidate, candidate_url = start_httpx_candidate(backend.address) if args.httpx_candidate else (None, None)
        try:
            targets = [("direct", f"http://{backend.address}/hello")]
            if nginx_url:
                targets.append(("nginx", nginx_url))
            targets.append(("corral-gateway", gateway_url))
            if candidate_url:
                targets.append(("uvicorn+httpx", candidate_url))
            for _, url in targets:
                asyncio.run(wait_answering(url))
            rounds: dict[str, list[dict]] = {name: [] for name, _ in targets}
            for round_ in range(args.rounds):  # interleaved, so drifting load on the machine hits all alike
                for name, url in targets[round_ % len(targets):] + targets[:round_ % len(targets)]:
                    rounds[name].append(asyncio.run(measure(url, args.serial, args.requests, args.concurrency)))
            results = [summary(name, rounds[name]) for name, _ in targets]
            for result in results:
                print(json.dumps(result), flush=True)
        finally:
            stop(gateway)
            stop(candidate)
            stop(nginx)
    if not nginx_url:
        print(nginx_note)
    direct = results[0]
    report = {"bench": "gateway", "rounds": args.rounds, "serial": args.serial, "requests": args.requests,
              "concurrency": args.concurrency, "cpus": os.cpu_count(), "load_average": os.getloadavg()[0],
              "nginx": nginx_note, "results": results,
              "added_p50_ms": {r["target"]: round(r["p50_ms"] - direct["p50_ms"], 3) for r in results[1:]},
              "added_p99_ms": {r["target"]: round(r["p99_ms"] - direct["p99_ms"], 3) for r in results[1:]}}
    print(json.dumps({k: v for k, v in report.items() if k != "results"}))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
