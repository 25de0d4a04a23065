"""Does polling topple the controller? A real controller and two agents (4 simulated GPUs each) schedule an
array of one-GPU `true` tasks (more than can start in the window) while 1,000 clients poll it as the
Slurm commands do: each, in a loop, sends what squeue (GET /jobs, every user's, arrays combined), sacct
(GET /accounting, the caller's jobs since midnight) or `scontrol show job` (GET /jobs/{id}) send, on a
fresh connection, as its user (10 users, 100 clients each: a job array's tasks
polling, say), sleeps and retries on 429 as corral.slurm.common.http does (1 s, 2 s, ... at least
Retry-After, 6 tries), then waits POLL_INTERVAL_S (0.5 to 1.5 s).

Four phases, each on a fresh controller, in one run: without [ratelimit], no pollers then the pollers;
with [ratelimit] enabled (Slurm's defaults: 30 at once, 2 per second per user), the same two. For each,
over a window of WINDOW_S after WARMUP_S: the array tasks started per second, the scheduling cycles (mean
duration, from GET /health's `cycles` and `cycle_s`), the share of a core the controller used, and the
pollers' requests (answered, refused with 429, given up after 6 tries, failed).

The pollers are one asyncio process of raw sockets (httpx would cost the bench more CPU than the
controller). This machine has 2 cores: the pollers, the agents, their tasks and the controller share them
(and other work on the machine: see the load averages), so the pollers' own CPU (reported) slows
everything, rate limited or not.

Memory mode (--pending N, default in `make bench`: 100,000): a controller with two registered stand-in
nodes (8 GPUs each, nobody runs their jobs) takes N pending one-GPU jobs as arrays of 1,000 over the API;
reports its resident memory before, after the submissions and every 10 of 40 more cycles (each woken by a
held job's submission), and the mean cycle time with N pending.

--raw-lists: the squeue the pollers send is `squeue -r` (GET /jobs without combine_arrays: every pending
task a record, 8,000 of them); --records-per-token N sets [ratelimit] records_per_token in the limited
phases (default 1,000; 0: a list costs one token whatever its length).

    python bench/polling_load.py [--pollers 1000] [--window-s 20] [--pending 100000] [--raw-lists]
                                 [--records-per-token N]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.harness import API, Cluster, wait_for  # noqa: E402

POLLERS = 1000
USERS = 10
ARRAY_TASKS = 8000  # more than a window can start
ARRAY_SIZE = 1000  # MaxArraySize
WINDOW_S = 20.0
CYCLES = 40  # memory mode: cycles over the pending jobs
POLL_INTERVAL_S = 1.0
WARMUP_S = 5.0
RETRIES = 5  # as corral.slurm.common.http.RATE_LIMIT_RETRIES
MAX_WAIT_S = 10.0
BASE_CONFIG = "kill_grace_s = 2\nnode_timeout_s = 30\n"
LIMITS = "[ratelimit]\nenabled = true\n"  # Slurm's defaults otherwise


# ----- the pollers (a child process: `polling_load.py poll CONFIG_JSON`)

async def _fetch(host: str, port: int, request: bytes) -> tuple[int, float]:
    """(status, Retry-After) of one request on a fresh connection, as the Slurm commands send them."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        data = await reader.read()
    finally:
        writer.close()
    head = data.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    status = int(head[0].split(" ", 2)[1])
    retry_after = next((float(line.split(":", 1)[1]) for line in head[1:] if line.lower().startswith("retry-after:")),
                       0.0)
    return status, retry_after


async def _client(n: int, config: dict, counts: dict, stop: asyncio.Event) -> None:
    host, port = config["host"], config["port"]
    user = n % len(config["credentials"])
    credential = config["credentials"][user]
    # What squeue, sacct (the caller's own jobs, since midnight) and scontrol show job send.
    midnight = int(time.mktime(time.localtime()[:3] + (0, 0, 0, 0, 0, -1)))
    combine = "" if config.get("raw_lists") else "combine_arrays=true&"
    paths = [f"{API}/jobs?{combine}limit=10000",
             f"{API}/accounting?user=poller{user}&since={midnight}&combine_arrays=true&limit=10000",
             f"{API}/jobs/{1 + n % 50}"]
    requests = [f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json\r\nConnection: close\r\n"
                f"Authorization: Bearer {credential}\r\n\r\n".encode() for path in paths]
    await asyncio.sleep(random.uniform(0, POLL_INTERVAL_S))  # the clients do not start in lockstep
    turn = n
    while not stop.is_set():
        request = requests[turn % len(requests)]
        turn += 1
        for retry in range(1, RETRIES + 2):
            try:
                status, retry_after = await _fetch(host, port, request)
            except (OSError, IndexError, ValueError):
                counts["failed"] += 1
                break
            if status != 429:
                counts["answered"] += 1
                break
            counts["refused"] += 1
            if retry > RETRIES:
                counts["gave_up"] += 1
                break
            await asyncio.sleep(min(max(retry_after, retry), MAX_WAIT_S))
        await asyncio.sleep(POLL_INTERVAL_S * random.uniform(0.5, 1.5))


async def _poll(config: dict) -> None:
    counts = {"answered": 0, "refused": 0, "gave_up": 0, "failed": 0}
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    clients = [asyncio.create_task(_client(n, config, counts, stop)) for n in range(config["pollers"])]
    await stop.wait()
    await asyncio.wait(clients, timeout=MAX_WAIT_S + 2)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({**counts, "poller_cpu_s": round(usage.ru_utime + usage.ru_stime, 1)}), flush=True)


def start_pollers(cluster: Cluster, pollers: int, raw_lists: bool = False) -> subprocess.Popen:
    from corral.controller import credentials as cred

    key = cred.signing_key(cluster.secret)
    credentials = [cred.issue_user(key, f"poller{u}", 30000 + u, 30000 + u, time.time(), 3600) for u in range(USERS)]
    config = {"host": "127.0.0.1", "port": cluster.port, "pollers": pollers, "credentials": credentials,
              "raw_lists": raw_lists}
    return subprocess.Popen([sys.executable, __file__, "poll", json.dumps(config)], stdout=subprocess.PIPE, text=True)


def stop_pollers(proc: subprocess.Popen) -> dict:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    return json.loads(out.strip().splitlines()[-1])


# ----- measuring the controller

def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmRSS for process {pid}")


def cycle_counters(cluster: Cluster) -> tuple[int, float]:
    health = cluster.http.get(f"{API}/health").json()
    return health["cycles"], health["cycle_s"]


def phase(limited: bool, pollers: int, window_s: float, raw_lists: bool = False,
          records_per_token: int | None = None) -> dict:
    """A fresh controller and two agents, an array of one-GPU `true` tasks to schedule (more than the window
    can start), with or without the pollers: what the scheduling did during `window_s`."""
    with tempfile.TemporaryDirectory() as tmp:
        limits = LIMITS + (f"records_per_token = {records_per_token}\n" if records_per_token is not None else "")
        cluster = Cluster(Path(tmp), nodes=2, gpus=4, config=BASE_CONFIG + (limits if limited else "")).start()
        # Without limits, the pollers can keep the controller's answers waiting past the harness's 30 s.
        cluster.http.timeout = httpx.Timeout(600)
        proc = start_pollers(cluster, pollers, raw_lists) if pollers else None
        result: dict = {}
        try:
            array_ids = [cluster.submit(argv=["true"], gpus=1, output="/dev/null", user="root",
                                        array=f"0-{ARRAY_SIZE - 1}") for _ in range(ARRAY_TASKS // ARRAY_SIZE)]
            time.sleep(WARMUP_S)
            result = _window(cluster, array_ids, window_s)
        finally:
            if proc is not None:
                result["pollers"] = stop_pollers(proc)
            cluster.stop()
    return result


def _window(cluster: Cluster, array_ids: list[int], window_s: float) -> dict:
    cycles0, cycle_s0 = cycle_counters(cluster)
    cpu0, t0 = cpu_s(cluster.controller.pid), time.time()
    time.sleep(window_s)
    cycles, cycle_s = cycle_counters(cluster)
    cpu1, t1 = cpu_s(cluster.controller.pid), time.time()
    tasks = cluster.http.get(f"{API}/accounting", params={"ids": ",".join(map(str, array_ids))}).json()
    starts = [task["start_time"] for task in tasks if task["start_time"] is not None]
    started = sum(1 for start in starts if t0 <= start < t1)
    if len(starts) > 0.95 * ARRAY_TASKS:
        print("polling_load: the array nearly ran out during the window: raise ARRAY_TASKS", file=sys.stderr)
    return {"jobs_started_per_s": round(started / (t1 - t0), 1), "cycles": cycles - cycles0,
            "cycle_mean_ms": round(1e3 * (cycle_s - cycle_s0) / max(1, cycles - cycles0), 2),
            "controller_cpu_share": round((cpu1 - cpu0) / (t1 - t0), 2),
            "controller_rss_mib": rss_mib(cluster.controller.pid)}


def measure(pollers: int = POLLERS, window_s: float = WINDOW_S, raw_lists: bool = False,
            records_per_token: int | None = None) -> dict:
    load_before = os.getloadavg()[0]
    phases = {name: phase(limited, n, window_s, raw_lists, records_per_token) for name, limited, n in (
        ("quiet", False, 0), ("polled_no_limits", False, pollers),
        ("quiet_limits_on", True, 0), ("polled_limits_on", True, pollers))}

    def slowdown(polled: str, quiet: str) -> dict:
        return {"jobs_per_s": round(1 - phases[polled]["jobs_started_per_s"] / phases[quiet]["jobs_started_per_s"], 3),
                "cycle_ms": round(phases[polled]["cycle_mean_ms"] / phases[quiet]["cycle_mean_ms"] - 1, 3)}

    return {"bench": "polling_load", "pollers": pollers, "users": USERS, "poll_interval_s": POLL_INTERVAL_S,
            "raw_lists": raw_lists, "records_per_token": records_per_token,
            "window_s": window_s, "cpus": os.cpu_count(), "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2), **phases,
            "slowdown_without_limits": slowdown("polled_no_limits", "quiet"),
            "slowdown_with_limits": slowdown("polled_limits_on", "quiet_limits_on")}


# ----- memory with many pending jobs

def measure_pending(pending: int = 100_000, array_size: int = 1000) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), nodes=0, config="kill_grace_s = 2\nnode_timeout_s = 3600\n")
        cluster.start_controller()
        try:
            for name in ("bench1", "bench2"):
                body = {"node": name, "address": "127.0.0.1", "cpus": 64, "mem_mib": 512_000,
                        "gpus": [{"index": i} for i in range(8)]}
                cluster.http.post(f"{API}/agents/register", json=body).raise_for_status()
            pid = cluster.controller.pid
            empty = rss_mib(pid)
            started = time.perf_counter()
            for n in range(pending // array_size):
                cluster.submit(argv=["true"], gpus=1, output="/dev/null", array=f"0-{array_size - 1}",
                               user=f"user{n % USERS}", name=f"bench{n}")
            submit_s = time.perf_counter() - started
            submitted = rss_mib(pid)
            cycles0, cycle_s0 = cycle_counters(cluster)
            after = {}  # cycles run -> RSS: whether memory keeps growing as cycles run
            for n in range(1, CYCLES + 1):  # each held job wakes the loop: one cycle over every pending job
                before = cycle_counters(cluster)[0]
                cluster.submit(argv=["true"], gpus=1, output="/dev/null", hold=True)
                wait_for(lambda b=before: cycle_counters(cluster)[0] > b, timeout_s=60)
                if n % 10 == 0:
                    after[n] = rss_mib(pid)
            cycles, cycle_s = cycle_counters(cluster)
        finally:
            cluster.stop()
    return {"bench": "pending_memory", "pending": pending, "rss_empty_mib": empty, "rss_submitted_mib": submitted,
            "rss_after_cycles_mib": after, "kib_per_pending_job": round((submitted - empty) * 1024 / pending, 2),
            "submit_s": round(submit_s, 1), "cycles": cycles - cycles0,
            "cycle_mean_s": round((cycle_s - cycle_s0) / max(1, cycles - cycles0), 3)}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pollers", type=int, default=POLLERS)
    parser.add_argument("--window-s", type=float, default=WINDOW_S)
    parser.add_argument("--pending", type=int, default=100_000, help="0: skip the memory mode")
    parser.add_argument("--no-polling", action="store_true", help="the memory mode alone")
    parser.add_argument("--raw-lists", action="store_true", help="pollers list jobs as squeue -r does")
    parser.add_argument("--records-per-token", type=int, default=None, help="[ratelimit] records_per_token")
    args = parser.parse_args(argv)
    results = []
    if not args.no_polling:
        results.append(measure(args.pollers, args.window_s, args.raw_lists, args.records_per_token))
        print(json.dumps(results[-1]), flush=True)
    if args.pending:
        results.append(measure_pending(args.pending))
        print(json.dumps(results[-1]), flush=True)
    return results


if __name__ == "__main__":
    if sys.argv[1:2] == ["poll"]:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
        asyncio.run(_poll(json.loads(sys.argv[2])))
    else:
        main()
