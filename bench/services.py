"""Services under load, measured on a real cluster (issue 22): a controller and two agents (the e2e tests'
harness, SQLite), `corral gateway` as its own process, and a small HTTP app (bench/service_app.py) as the
service. A load generator (aiohttp, open loop at `--rate` requests/s through the gateway, on loopback) runs
during each event: GETs, which the gateway may retry on another replica, and POSTs with a body, which it may
not, half the rate each, each taking the app `--work-ms`. Each event reports the requests sent during it,
the failed ones (and why), and p50/p99 latency, counting every request in flight at some time during it:

1. update: a rolling update of a 2-replica service to a new VERSION in its environment (zero failed is the
   target; every response sent after the update finished must be the new version);
2. crash: kill -9 of one replica's process (zero failed), and the time until it is ready again (its restart
   backoff is `restart.backoff_initial_s`, 10 s by default);
3. scale-up: an autoscaled service (target_inflight 4, 1 to 3 replicas) at rest, then slow requests (200 ms
   each, in flight = rate x 0.2): the time from load onset until a second replica is ready;
4. cold start: a service scaled to zero (scale_to_zero, idle_s 3): one request's wait until it is answered;
5. with --failover, on a second cluster (two controllers on PostgreSQL, the gateway told both): SIGKILL of
   the leading controller under the same load as 1 and 2.

The load is bounded (each phase stops by itself), everything binds 127.0.0.1, and the cluster's processes and
files are removed at the end.

    .venv/bin/python bench/services.py [--rate 100] [--work-ms 20] [--cold-rounds 3] [--failover] [--json F]
"""
from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.harness import API, Cluster, free_port, wait_for  # noqa: E402
from tests.e2e.standby import StandbyCluster  # noqa: E402

APP = ROOT / "bench" / "service_app.py"
METHODS = ("GET", "POST")
READINESS = {"http": {"path": "/", "port": "http"}, "period_s": 0.5, "timeout_s": 1, "failure_threshold": 2}


@dataclass
class Sample:
    sent: float  # monotonic
    latency_s: float
    ok: bool
    answer: str  # the body, or why it failed
    method: str


@dataclass
class Load:
    """Requests to `url` at `rate` per second from their own thread and event loop until stopped (open loop: a
    slow answer does not slow the sending), keeping every request's outcome. Each is a POST with a small body
    (which the gateway may not send twice) with probability `post_share`, else a GET, drawn at random: GETs
    and POSTs sent alternately would fall into step with the gateway's round-robin and each go to one
    replica, so a killed replica would only ever hold one kind."""

    url: str
    rate: float
    post_share: float = 0.0
    seed: int = 1
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Load:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=120)

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=90)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
            pending: set[asyncio.Task] = set()
            began, sent = time.monotonic(), 0
            draw = random.Random(self.seed)
            while not self._stop.is_set():
                method = "POST" if draw.random() < self.post_share else "GET"
                task = asyncio.create_task(self._one(session, method))
                pending.add(task)
                task.add_done_callback(pending.discard)
                sent += 1
                await asyncio.sleep(max(0.0, began + sent / self.rate - time.monotonic()))
            if pending:
                await asyncio.wait(pending)

    async def _one(self, session: aiohttp.ClientSession, method: str) -> None:
        sent = time.monotonic()
        try:
            payload = b'{"prompt": "hello"}' if method == "POST" else None
            async with session.request(method, self.url, data=payload) as reply:
                body = (await reply.read()).decode(errors="replace").strip()
                ok, answer = reply.status == 200, body if reply.status == 200 else f"HTTP {reply.status}: {body}"
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            ok, answer = False, f"{type(exc).__name__}: {exc}"
        self.samples.append(Sample(sent, time.monotonic() - sent, ok, answer, method))

    def window(self, start: float, end: float, method: str) -> dict:
        """Requests in flight at some time in [start, end) (sent before its end, answered after its start: a
        request on a replica when it is killed counts): how many, how many failed (and the first few
        reasons), p50/p99."""
        chosen = [s for s in self.samples if s.method == method and s.sent < end and s.sent + s.latency_s >= start]
        latencies = sorted(s.latency_s for s in chosen)
        failures = [s.answer for s in chosen if not s.ok]

        def pct(q: float) -> float | None:
            return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 1) if latencies else None

        return {"sent": len(chosen), "failed": len(failures), "failures": sorted(set(failures))[:5],
                "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": pct(1.0)}


class Bench:
    def __init__(self, root: Path, db: str | None = None) -> None:
        """`db`: a PostgreSQL URL: two controllers on it, one leading (the failover event)."""
        self.root = root
        config = "kill_grace_s = 5\nnode_timeout_s = 15\n"
        self.cluster: Cluster = (StandbyCluster(root, db=db, nodes=2, gpus=0, config=config) if db else
                                 Cluster(root, nodes=2, gpus=0, config=config))
        self.controllers = (",".join(self.cluster.url_of(i) for i in range(len(self.cluster.ports)))
                            if isinstance(self.cluster, StandbyCluster) else self.cluster.url)
        self.gateway_port = free_port()
        self.gateway: subprocess.Popen | None = None

    def start(self) -> None:
        self.cluster.start()
        corral = Path(sys.executable).parent / "corral"
        log = open(self.root / "gateway.log", "ab")
        env = {**os.environ, "CORRAL_SECRET_FILE": str(self.cluster.secret_file), "PYTHONUNBUFFERED": "1"}
        self.gateway = subprocess.Popen(
            [str(corral), "gateway", "--controller", self.controllers, "--port", str(self.gateway_port),
             "--report-every-s", "1", "--hold-s", "60"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def stop(self) -> None:
        if self.gateway is not None and self.gateway.poll() is None:
            os.killpg(self.gateway.pid, signal.SIGTERM)
            self.gateway.wait(timeout=10)
        for name in ("svcproof-web", "svcproof-auto", "svcproof-cold", "svcproof-ha"):
            self.cluster.http.delete(f"{API}/services/{name}")
        time.sleep(3)  # the replicas' SIGTERM, before the agents go
        self.cluster.stop()

    def url(self, service: str, query: str = "") -> str:
        return f"http://127.0.0.1:{self.gateway_port}/s/{service}/{query}"

    def apply(self, name: str, version: str, **spec: object) -> dict:
        body = {"name": name, "user": getpass.getuser(), "command": [sys.executable, str(APP)],
                "workdir": str(self.root),
                "env": {"VERSION": version, "PATH": os.environ["PATH"]}, "ports": [{"name": "http"}],
                "probes": {"readiness": READINESS}, "public": True, "replicas": 2, **spec}
        reply = self.cluster.http.post(f"{API}/services", json=body)
        assert reply.status_code in (200, 201), reply.text
        return reply.json()

    def show(self, name: str) -> dict:
        reply = self.cluster.http.get(f"{API}/services/{name}")
        assert reply.status_code == 200, reply.text
        return reply.json()

    def endpoints(self, name: str) -> list[dict]:
        return self.cluster.http.get(f"{API}/services/{name}/endpoints").json()["endpoints"]

    def settled(self, name: str, revision: int, ready: int) -> bool:
        """`ready` replicas, all of `revision`, ready, and nothing else running or draining."""
        shown = self.show(name)
        live = [r for r in shown["replicas"] if r["state"] not in ("COMPLETED", "CANCELLED", "FAILED")]
        return (len(live) == ready and all(r["revision"] == revision and r["ready"] for r in live)
                and len([e for e in self.endpoints(name) if not e["draining"]]) == ready
                and len(self.endpoints(name)) == ready)

    def settled_if_answering(self, name: str, revision: int, ready: int) -> bool:
        """settled(), False while no controller answers (a new leader rebuilds its engine first)."""
        try:
            return self.settled(name, revision, ready)
        except (AssertionError, httpx.TransportError, KeyError):
            return False

    def wait_gateway_routes(self, name: str) -> None:
        def answers() -> bool:
            try:
                return self.cluster.http.get(self.url(name), timeout=5).status_code == 200
            except Exception:  # noqa: BLE001 - not up yet, whatever the reason
                return False

        wait_for(answers, 60, 0.2, message=f"the gateway answering for {name}")

    # ----- the events

    def update_and_crash(self, rate: float, work_ms: float) -> list[dict]:
        """The rolling update, then the crash, under GETs (which the gateway may retry on another replica)
        and POSTs with a body (which it may not), half of each."""
        name = "svcproof-web"
        self.apply(name, "v1")
        wait_for(lambda: self.settled(name, 1, 2), 90, 0.3, message="2 ready replicas of revision 1")
        self.wait_gateway_routes(name)
        load = Load(self.url(name, f"?ms={work_ms:g}"), rate, post_share=0.5).start()
        results = []
        try:
            time.sleep(3)
            began = time.monotonic()
            for method in METHODS:
                results.append({"event": "steady (2 replicas)", "method": method,
                                **load.window(began - 3, began, method)})
            revision = self.apply(name, "v2")["revision"]
            wait_for(lambda: self.settled(name, revision, 2), 180, 0.2, message="the update to finish")
            done = time.monotonic()
            time.sleep(3)
            for method in METHODS:
                # From the gateway's next poll after the update ended.
                after = [s for s in load.samples if s.method == method and s.sent >= done + 0.5]
                old = [s.answer for s in after if s.ok and not s.answer.startswith("v2 ")]
                results.append({"event": "rolling update (2 replicas, v1 -> v2)", "method": method,
                                "took_s": round(done - began, 2), **load.window(began, done, method),
                                "after_sent": len(after), "after_not_new_version": len(old),
                                "after_failed": sum(not s.ok for s in after)})
            results.extend(self.crash(name, revision, load))
        finally:
            load.stop()
        return results

    def crash(self, name: str, revision: int, load: Load) -> list[dict]:
        victim = next(r for r in self.show(name)["replicas"] if r["ready"])
        pid = self.replica_pid(victim["index"])
        time.sleep(2)
        began = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not self.settled(name, revision, 2), 30, 0.05, message="the crash to be seen")
        seen = time.monotonic()
        wait_for(lambda: self.settled(name, revision, 2), 120, 0.1, message="the replica back")
        back = time.monotonic()
        time.sleep(2)
        shown = self.show(name)
        return [{"event": "replica crash (kill -9, 2 replicas)", "method": method, "replica": victim["index"],
                 "seen_after_s": round(seen - began, 2), "back_after_s": round(back - began, 2),
                 "backoff_initial_s": shown["spec"]["restart"]["backoff_initial_s"],
                 **load.window(began, back + 2, method),
                 "history": [h for h in shown["history"] if "restart" in h][-1:]} for method in METHODS]

    def failover(self, rate: float, work_ms: float) -> list[dict]:
        """The leading controller SIGKILLed under load; the gateway knows both controllers' URLs."""
        cluster = self.cluster
        assert isinstance(cluster, StandbyCluster)
        name = "svcproof-ha"
        self.apply(name, "v1")
        wait_for(lambda: self.settled(name, 1, 2), 90, 0.3, message="2 ready replicas")
        self.wait_gateway_routes(name)
        load = Load(self.url(name, f"?ms={work_ms:g}"), rate, post_share=0.5).start()
        try:
            time.sleep(3)
            old = cluster.leader()
            assert old is not None
            began = time.monotonic()
            cluster.signal(old, signal.SIGKILL)
            wait_for(lambda: cluster.leader() not in (None, old), 60, 0.05, message="a new leader")
            led = time.monotonic()
            wait_for(lambda: self.settled_if_answering(name, 1, 2), 60, 0.2, message="the service as it was")
            time.sleep(5)
            end = time.monotonic()
        finally:
            load.stop()
        return [{"event": "controller failover (SIGKILL of the leader, 2 controllers on PostgreSQL)",
                 "method": method, "new_leader_after_s": round(led - began, 2),
                 "restarts": [r["restarts"] for r in self.show(name)["replicas"]],
                 **load.window(began, end, method)} for method in METHODS]

    def replica_pid(self, index: int) -> int:
        """The live process that replica `index` started last (its pid file is the newest)."""
        for pid_file in sorted((self.root / "pids").glob(f"{index}-*"), key=lambda p: p.stat().st_mtime,
                               reverse=True):
            pid = int(pid_file.read_text())
            if Path(f"/proc/{pid}").exists():
                return pid
        raise AssertionError(f"no live process of replica {index}")

    def scale_up(self, rate: float) -> dict:
        name = "svcproof-auto"
        self.apply(name, "v1", replicas=1,
                   autoscale={"min_replicas": 1, "max_replicas": 3, "target_inflight": 4, "idle_s": 300})
        wait_for(lambda: self.settled(name, 1, 1), 90, 0.3, message="1 ready replica")
        self.wait_gateway_routes(name)
        load = Load(self.url(name, "?ms=200"), rate).start()
        began = time.monotonic()
        try:
            wait_for(lambda: len(self.endpoints(name)) >= 2, 120, 0.1, message="a second ready replica")
            second = time.monotonic()
            wait_for(lambda: self.show(name)["desired_replicas"] >= 2, 5, 0.1)
            time.sleep(2)
            shown = self.show(name)
        finally:
            load.stop()
        return {"event": f"scale-up (target_inflight 4, {rate:g} req/s x 200 ms)",
                "second_ready_after_s": round(second - began, 2), "desired_then": shown["desired_replicas"],
                "ready_then": shown["ready_replicas"], **load.window(began, second + 2, "GET")}

    def cold_starts(self, rounds: int) -> dict:
        name = "svcproof-cold"
        self.apply(name, "v1", replicas=1, autoscale={"min_replicas": 1, "max_replicas": 2, "target_inflight": 4,
                                                       "scale_to_zero": True, "idle_s": 3})
        waits, answers, zero_after = [], [], []
        for _ in range(rounds):
            began = time.monotonic()
            wait_for(lambda: self.show(name)["desired_replicas"] == 0 and not self.endpoints(name)
                     and not any(r["state"] in ("RUNNING", "PENDING", "COMPLETING") for r in
                                 self.show(name)["replicas"]), 120, 0.3, message="scaled to zero")
            zero_after.append(round(time.monotonic() - began, 1))
            sent = time.monotonic()
            reply = self.cluster.http.get(self.url(name), timeout=120)
            waits.append(round(time.monotonic() - sent, 2))
            answers.append(f"{reply.status_code} {reply.text.strip()}")
        return {"event": "cold start (scale_to_zero, idle_s 3)", "rounds": rounds, "first_request_wait_s": waits,
                "answers": answers, "zero_after_s": zero_after}


def failover(rate: float, work_ms: float) -> list[dict]:
    from tests.store.pg import fresh_pg_schema, pg_server_url_or_skip

    with tempfile.TemporaryDirectory(prefix="svcproof-bench-ha-") as tmp, \
            fresh_pg_schema(pg_server_url_or_skip()) as url:
        bench = Bench(Path(tmp), db=url)
        try:
            bench.start()
            return bench.failover(rate, work_ms)
        except BaseException:
            print(bench.cluster.logs()[-6000:], file=sys.stderr)
            raise
        finally:
            bench.stop()


def one_cluster(options: argparse.Namespace, only: set[str]) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="svcproof-bench-") as tmp:
        bench = Bench(Path(tmp))
        try:
            bench.start()
            results = bench.update_and_crash(options.rate, options.work_ms) if "update" in only else []
            if "scale" in only:
                results.append(bench.scale_up(options.scale_rate))
            if "cold" in only:
                results.append(bench.cold_starts(options.cold_rounds))
            return results
        except BaseException:
            print(bench.cluster.logs()[-6000:], (Path(tmp) / "gateway.log").read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            bench.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100, help="requests/s during the update and the crash")
    parser.add_argument("--work-ms", type=float, default=20,
                        help="how long the app takes per request during the update and the crash")
    parser.add_argument("--scale-rate", type=float, default=50, help="requests/s (200 ms each) for scale-up")
    parser.add_argument("--cold-rounds", type=int, default=3)
    parser.add_argument("--only", choices=("update", "scale", "cold", "failover"), action="append",
                        help="run only these events (update: the update and the crash); default: all but failover")
    parser.add_argument("--failover", action="store_true",
                        help="also fail the leading controller over (a second cluster: two controllers on "
                             "PostgreSQL, tests/store/pg.py's server or CORRAL_TEST_PG_URL)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    options = parser.parse_args()
    only = set(options.only or ("update", "scale", "cold")) | ({"failover"} if options.failover else set())
    load_before = os.getloadavg()
    results = one_cluster(options, only) if only & {"update", "scale", "cold"} else []
    if "failover" in only:
        results += failover(options.rate, options.work_ms)
    conditions = {"cpus": os.cpu_count(), "loadavg_before": [round(x, 1) for x in load_before],
                  "loadavg_after": [round(x, 1) for x in os.getloadavg()], "rate": options.rate,
                  "work_ms": options.work_ms}
    for result in results:
        print(json.dumps({**result, "conditions": conditions}))
    if options.json:
        options.json.write_text(json.dumps({"conditions": conditions, "results": results}, indent=1))


if __name__ == "__main__":
    main()
