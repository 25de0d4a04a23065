"""The controller's CPU per request in its HTTP layers, in process: the real ASGI app (create_app, with its
middleware, over a real SQLite store and one registered node) called directly with ASGI messages, no
socket and no client, so that the process's CPU clock counts only the app. Four requests, the hot ones
(docs/results.md "The controller's share per job"):

- `submit`: POST /api/v1/jobs of a held one-GPU job with a user credential (what sbatch --hold sends);
- `list`: GET /api/v1/jobs?user=<another user> with a user credential (squeue's; an empty list, so that the
  held jobs do not make it grow);
- `events`: POST /api/v1/agents/n1/events of one usage report, with the node's agent credential and epoch;
- `commands`: GET /api/v1/agents/n1/commands?after=..&wait_s=0 (a command poll that finds none waiting).

The kinds take turns request by request, `--rounds` rounds; CPU per request (time.process_time) is the
median over `--batches` batches. With `--profile KIND`, cProfile (CPU clock) over that kind's requests
prints its top functions by cumulative and own time.

    python bench/http_cost.py [--rounds 2000] [--batches 10] [--profile submit]

`--src DIR` runs against another checkout's `src` (to compare two commits in one run, taking turns)."""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

USER, UID = "httpcost-bench", 4242
SECRET = "http-cost-secret"
T0 = 1_750_000_000.0


def build(directory: Path):
    from corral.controller import credentials as cred
    from corral.controller.app import create_app
    from corral.controller.restore import restore_engine
    from corral.controller.service import ControllerService
    from corral.engine.config import LIVE, EngineConfig
    from corral.protocol import Registration
    from corral.store import Store

    store = Store.open(f"sqlite:///{directory / 'corral.db'}")
    service = ControllerService(restore_engine(EngineConfig(), LIVE, store, T0), store, clock=time.time)
    app = create_app(service, SECRET)
    registration = Registration(node="n1", address="127.0.0.1", cpus=64, mem_mib=512_000,
                                gpus=[{"index": i, "model": "sim-gpu"} for i in range(8)])
    reply = asyncio.get_event_loop().run_until_complete(service.register(registration))
    key = cred.signing_key(SECRET)
    user = cred.issue_user(key, USER, UID, UID, time.time(), 3600)
    agent = cred.issue_agent(key, "n1")
    return app, service, user, agent, reply.epoch


def requests(user: str, agent: str, epoch: str, workdir: str) -> dict[str, tuple[str, str, str, bytes, dict]]:
    submit = json.dumps({"argv": ["true"], "gpus": 1, "workdir": workdir, "user": USER, "output": "/dev/null",
                         "hold": True, "time_limit_s": 600}).encode()
    events = json.dumps({"events": [{"kind": "usage", "job_id": 1, "usage": {}}]}).encode()
    as_user = {"authorization": f"Bearer {user}", "content-type": "application/json"}
    as_agent = {"authorization": f"Bearer {agent}", "content-type": "application/json",
                "x-corral-epoch": epoch}
    return {"submit": ("POST", "/api/v1/jobs", "", submit, as_user),
            "list": ("GET", "/api/v1/jobs", f"user={USER}-other", b"", as_user),
            "events": ("POST", "/api/v1/agents/n1/events", "", events, as_agent),
            "commands": ("GET", "/api/v1/agents/n1/commands", "after=0&wait_s=0", b"", as_agent)}


async def call(app, method: str, path: str, query: str, body: bytes, headers: dict[str, str]) -> int:
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    if body:
        raw.append((b"content-length", str(len(body)).encode()))
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
             "query_string": query.encode(), "headers": [(b"host", b"controller")] + raw,
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000), "state": {}}
    sent = False
    status = 0

    async def receive() -> dict:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def measure(app, kinds: dict, rounds: int, batches: int, profile: str | None) -> dict:
    for kind, request in kinds.items():  # warm: the first calls build caches
        status = await call(app, *request)
        if status >= 300:
            raise RuntimeError(f"{kind}: {status}")
    cpu_us: dict[str, list[float]] = {kind: [] for kind in kinds}
    profiler = cProfile.Profile(time.process_time) if profile else None
    for _ in range(batches):
        spent = dict.fromkeys(kinds, 0.0)
        for _ in range(rounds // batches):
            for kind, request in kinds.items():
                if profiler is not None and kind == profile:
                    profiler.enable()
                started = time.process_time()
                status = await call(app, *request)
                spent[kind] += time.process_time() - started
                if profiler is not None and kind == profile:
                    profiler.disable()
                if status >= 300:
                    raise RuntimeError(f"{kind}: {status}")
        for kind in kinds:
            cpu_us[kind].append(spent[kind] / (rounds // batches) * 1e6)
    if profiler is not None:
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(30)
    return {kind: {"median_us": round(statistics.median(v), 1), "min_us": round(min(v), 1)}
            for kind, v in cpu_us.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--profile", choices=["submit", "list", "events", "commands"])
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parent.parent / "src")
    args = parser.parse_args()
    sys.path.insert(0, str(args.src.resolve()))
    import logging
    logging.disable(logging.INFO)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="http-cost-") as tmp:
        asyncio.set_event_loop(asyncio.new_event_loop())
        app, _service, user, agent, epoch = build(Path(tmp))
        kinds = requests(user, agent, epoch, tmp)
        result = asyncio.get_event_loop().run_until_complete(
            measure(app, kinds, args.rounds, args.batches, args.profile))
    print(json.dumps({"bench": "http-cost", "src": str(args.src), "rounds": args.rounds, **result,
                      "load_avg_1m_before_after": [round(load, 2), round(os.getloadavg()[0], 2)]}))


if __name__ == "__main__":
    main()
