"""The controller's own cost per request, without a client process start: round trips from one warm
process over keep-alive connections to a local controller (one stand-in agent), for the three requests
the Slurm commands make most: `GET /health` (no credential), `GET /jobs?user=` with a user credential
(squeue; of a user with no jobs, so that the held jobs the submissions leave do not make the list grow)
and `POST /jobs` of a held one-GPU job with a user credential (sbatch --hold).

Two phases per kind: latency (one connection, one request after another, the kinds taking turns request
by request so that each sees the same load: median and p90 in ms) and cost (`--connections` connections
at once, as fast as they are answered: requests/s and the controller's CPU ms per request, from /proc).

    python bench/request_cost.py [--requests 300] [--connections 8]"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.harness import API, Cluster, wait_for  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import standin_agents  # noqa: E402

from corral.controller import credentials as cred  # noqa: E402

USER, UID = "apifast-bench", 4242


def _requests(workdir: str) -> dict[str, tuple[str, str, bytes | None]]:
    body = json.dumps({"argv": ["true"], "gpus": 1, "workdir": workdir, "user": USER, "output": "/dev/null",
                       "hold": True, "time_limit_s": 600}).encode()
    return {"health": ("GET", f"{API}/health", None), "list_jobs": ("GET", f"{API}/jobs?user={USER}-other", None),
            "submit_held": ("POST", f"{API}/jobs", body)}


def _call(conn: http.client.HTTPConnection, headers: dict[str, str], method: str, path: str,
          body: bytes | None) -> None:
    conn.request(method, path, body=body, headers=headers)
    reply = conn.getresponse()
    data = reply.read()
    if reply.status >= 300:
        raise RuntimeError(f"{method} {path}: {reply.status} {data[:300]!r}")


def measure(requests: int = 300, connections: int = 8) -> dict:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="request-cost-") as tmp:
        cluster = Cluster(Path(tmp), nodes=0)
        cluster.start_controller()
        # One stand-in node (bench/standin_agents.py), so that a job is admitted; the jobs are held.
        agents = standin_agents.spawn(cluster.url, cluster.secret_file, nodes=1, gpus=8, prefix="request-cost-")
        try:
            wait_for(lambda: len(cluster.nodes()) == 1, timeout_s=60, message="the stand-in agent registered")
            assert cluster.controller is not None
            controller = psutil.Process(cluster.controller.pid)
            credential = cred.issue_user(cred.signing_key(cluster.secret), USER, UID, UID, time.time(), 3600)
            headers = {"Authorization": f"Bearer {credential}", "Content-Type": "application/json"}
            kinds = _requests(tmp)
            host, port = cluster.url.removeprefix("http://").split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            for method, path, body in kinds.values():  # warm: the routes' first calls build their models
                _call(conn, headers, method, path, body)
            times: dict[str, list[float]] = {kind: [] for kind in kinds}
            for _ in range(requests):
                for kind, (method, path, body) in kinds.items():
                    started = time.perf_counter()
                    _call(conn, headers, method, path, body)
                    times[kind].append((time.perf_counter() - started) * 1000)
            conn.close()
            result: dict = {"bench": "request-cost", "requests": requests, "connections": connections}
            for kind, values in times.items():
                values.sort()
                result[kind] = {"median_ms": round(statistics.median(values), 2),
                                "p90_ms": round(values[int(len(values) * 0.9)], 2)}
            for kind, (method, path, body) in kinds.items():
                result[kind].update(_cost(controller, host, int(port), headers, method, path, body, requests,
                                          connections))
            result["load_avg_1m_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            return result
        finally:
            agents.terminate()
            agents.wait(10)
            cluster.stop()


def _cost(controller: psutil.Process, host: str, port: int, headers: dict[str, str], method: str, path: str,
          body: bytes | None, requests: int, connections: int) -> dict:
    """`requests` x `connections` requests from `connections` threads at once: rate and controller CPU."""
    errors: list[BaseException] = []

    def run() -> None:
        conn = http.client.HTTPConnection(host, port, timeout=60)
        try:
            for _ in range(requests):
                _call(conn, headers, method, path, body)
        except BaseException as error:  # noqa: BLE001 - re-raised below
            errors.append(error)
        finally:
            conn.close()

    threads = [threading.Thread(target=run) for _ in range(connections)]
    cpu0, started = sum(controller.cpu_times()[:2]), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed, cpu1 = time.perf_counter() - started, sum(controller.cpu_times()[:2])
    if errors:
        raise errors[0]
    total = requests * connections
    return {"per_s": round(total / elapsed, 1), "controller_cpu_ms": round((cpu1 - cpu0) / total * 1000, 3)}


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    result = measure(args.requests, args.connections)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
