"""The fault suite (`make chaos`): randomized runs of a real cluster under a job load, with faults injected,
and a checker that proves no accepted job was lost, none ran twice, no GPU hosted two jobs at once, and
accounting equals what ran.

    python -m tests.chaos.run --faults 200 [--controllers 2] [--netns] [--seed N] [--json report.json]

A round starts a fresh cluster (controllers, agents; PostgreSQL of its own, a fresh schema per round),
submits jobs through whichever controller leads while faults are injected one after another, then heals
everything (resumes the paused, restarts the dead), waits for every job to end and checks the history.
Faults counted: one per injection; `--faults` is the total over all rounds. With `--netns` every daemon
runs on a virtual host of its own (tests/multihost/netns.py) and partitions join the faults: a host's
network cable pulled for a while (the leader's, an agent's, the database's).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import httpx

from corral.hostlist import expand
from tests.chaos.checker import FINAL_STATES, Violation, check, read_markers, redone
from tests.chaos.cluster import NODE_TIMEOUT_S, ChaosCluster, Database
from tests.chaos.workload import random_shapes
from tests.multihost.netns import VirtualNetwork, unavailable_reason

DRAIN_TIMEOUT_S = 180.0


@dataclasses.dataclass
class FaultRecord:
    kind: str
    target: str
    at: float
    recovery_s: float | None = None  # failover, controller restart or agent reconcile time, by kind
    lasted_s: float | None = None  # how long a partition or a pause lasted
    # controller_pause: the jobs running when every controller stopped (job id: its run), and those of
    # them that lost that run (ended other than COMPLETED, or requeued) by the time the cluster was back
    running: dict[int, int] = dataclasses.field(default_factory=dict)
    killed: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class RoundResult:
    faults: list[FaultRecord]
    accepted: int
    ambiguous: int
    states: Counter
    violations: list[Violation]
    requeues: int
    redone: int  # jobs whose work finished in two runs (requeued after a node failure it had outlived)


# ----- faults


def _leader_index(cluster: ChaosCluster) -> int | None:
    found = cluster.leader()
    return None if found is None else cluster.urls.index(found[0])


def _wait_new_leader(cluster: ChaosCluster, old: int, since: float) -> float:
    """Seconds from `since` until a controller other than `old` leads (or `old` again, when it is alone)."""
    while True:
        index = _leader_index(cluster)
        if index is not None and (index != old or len(cluster.controllers) == 1):
            return time.monotonic() - since
        if time.monotonic() - since > 60:
            raise TimeoutError("no leader 60 s after the fault")
        time.sleep(0.02)


def kill_leader(cluster: ChaosCluster, rng: random.Random) -> FaultRecord:
    old = _leader_index(cluster)
    if old is None:
        return FaultRecord("leader_kill", "none leading", time.time())
    process = cluster.controllers[old]
    record = FaultRecord("leader_kill", process.name, time.time())
    started = time.monotonic()
    process.kill()
    if len(cluster.controllers) == 1:
        time.sleep(rng.uniform(0.0, 2.0))
        process.start()
    record.recovery_s = _wait_new_leader(cluster, old, started)
    if not process.alive:
        process.start()  # the old leader comes back as a standby
    return record


def pause_leader(cluster: ChaosCluster, rng: random.Random) -> FaultRecord:
    old = _leader_index(cluster)
    if old is None:
        return FaultRecord("leader_pause", "none leading", time.time())
    process = cluster.controllers[old]
    record = FaultRecord("leader_pause", process.name, time.time())
    started = time.monotonic()
    process.pause()
    record.recovery_s = _wait_new_leader(cluster, old, started)
    time.sleep(rng.uniform(0.0, 3.0))  # the others go on while it sleeps; then it wakes, deposed
    process.resume()
    return record


def kill_standby(cluster: ChaosCluster, rng: random.Random) -> FaultRecord:
    leader = _leader_index(cluster)
    standbys = [i for i, p in enumerate(cluster.controllers) if i != leader and p.alive]
    if not standbys:
        return FaultRecord("standby_kill", "none", time.time())
    process = cluster.controllers[rng.choice(standbys)]
    process.kill()
    time.sleep(rng.uniform(0.0, 2.0))
    process.start()
    return FaultRecord("standby_kill", process.name, time.time())


def kill_agent(cluster: ChaosCluster, rng: random.Random) -> FaultRecord:
    node = rng.choice(sorted(cluster.agents))
    record = FaultRecord("agent_kill", node, time.time())
    cluster.agents[node].kill()
    # Sometimes past the node timeout (15 s), sometimes past only the fencing (10 s: its leaders kill its
    # tasks, decision 0017): its tasks run unwatched meanwhile.
    time.sleep(rng.uniform(0.0, 20.0))
    cluster.agents[node].start()
    record.recovery_s = cluster.wait_nodes_up(60.0, {node})
    return record


def pause_agent(cluster: ChaosCluster, rng: random.Random) -> FaultRecord:
    node = rng.choice(sorted(cluster.agents))
    record = FaultRecord("agent_pause", node, time.time())
    cluster.agents[node].pause()
    time.sleep(rng.uniform(1.0, 18.0))  # sometimes past the fencing (10 s) or the node timeout (15 s)
    cluster.agents[node].resume()
    record.recovery_s = cluster.wait_nodes_up(60.0, {node})
    return record


def restart_database(cluster: ChaosCluster, rng: random.Random) -> FaultRecord:
    assert cluster.database is not None
    record = FaultRecord("db_restart", "postgresql", time.time())
    started = time.monotonic()
    cluster.database.restart()
    record.recovery_s = time.monotonic() - started
    return record


def _cut(cluster: ChaosCluster, host: str, seconds: float) -> None:
    assert cluster.net is not None
    cluster.net.set_link(host, False)
    try:
        time.sleep(seconds)
    finally:
        cluster.net.set_link(host, True)


def partition_leader(cluster: ChaosCluster, rng: random.Random) -> FaultRecord:
    old = _leader_index(cluster)
    if old is None:
        return FaultRecord("partition_leader", "none leading", time.time())
    host = cluster.controllers[old].name
    record = FaultRecord("partition_leader", host, time.time())
    assert cluster.net is not None
    started = time.monotonic()
    cluster.net.set_link(host, False)
    try:
        if len(cluster.controllers) > 1:
            record.recovery_s = _wait_new_leader(cluster, old, started)
        time.sleep(rng.uniform(0.0, 4.0))
    finally:
        cluster.net.set_link(host, True)
    return record


def partition_agent(cluster: ChaosCluster, rng: random.Random) -> FaultRecord:
    node = rng.choice(sorted(cluster.agents))
    record = FaultRecord("partition_agent", node, time.time())
    # Shorter than the fencing (10 s), between it and the node timeout (15 s: frozen, then thawed), or
    # longer (declared down, its jobs run again elsewhere while their old runs stay frozen here).
    record.lasted_s = rng.uniform(1.0, 25.0)
    _cut(cluster, node, record.lasted_s)
    record.recovery_s = cluster.wait_nodes_up(60.0, {node})
    return record


def partition_database(cluster: ChaosCluster, rng: random.Random) -> FaultRecord:
    record = FaultRecord("partition_db", "db", time.time(), lasted_s=rng.uniform(1.0, 8.0))
    _cut(cluster, "db", record.lasted_s)
    return record


CONTROLLER_PAUSES_S = (20.0, 60.0, 120.0)
_pauses_so_far = itertools.count()  # over all rounds: the pauses take 20, 60 and 120 s in turn
PAUSE_WANTS_RUNNING = 3  # jobs running before every controller is stopped (waited for up to 30 s)


def _running(cluster: ChaosCluster) -> dict[int, int]:
    """The jobs running now, by id: their restart counts (which run of each is running)."""
    return {job_id: r.get("restart_count", 0) for job_id, r in _records(cluster).items() if r["state"] == "RUNNING"}


def pause_controllers(cluster: ChaosCluster, rng: random.Random) -> FaultRecord:
    """Every controller SIGSTOPped at once (no standby can take over: a GC pause, a VM migration, a slow
    disk sync of a lone controller) for 20, 60 or 120 s, then resumed. The controllers were away, they gave
    nothing away: every job running then must go on in the same run (decision 0017)."""
    seconds = CONTROLLER_PAUSES_S[next(_pauses_so_far) % len(CONTROLLER_PAUSES_S)]
    deadline = time.monotonic() + 30.0
    while len(running := _running(cluster)) < PAUSE_WANTS_RUNNING and time.monotonic() < deadline:
        time.sleep(0.2)
    record = FaultRecord("controller_pause", f"{len(cluster.controllers)} controller(s) for {seconds:g} s",
                         time.time(), lasted_s=seconds, running=running)
    for process in cluster.controllers:
        process.pause()
    time.sleep(seconds)
    started = time.monotonic()
    for process in cluster.controllers:
        process.resume()
    cluster.wait_leader(60.0)
    cluster.wait_nodes_up(60.0)
    record.recovery_s = time.monotonic() - started
    # A node the controllers wrongly declared down comes back only after its agent re-registered; its jobs
    # are requeued by then. Past a node timeout more of listening, none can still be on its way down.
    time.sleep(cluster.node_timeout_s)
    records = _records(cluster)
    record.killed = sorted(job_id for job_id, run in running.items()
                           if records[job_id].get("restart_count", 0) != run
                           or records[job_id]["state"] not in ("RUNNING", "COMPLETED"))
    return record


FAULTS = {"leader_kill": kill_leader, "leader_pause": pause_leader, "standby_kill": kill_standby,
          "agent_kill": kill_agent, "agent_pause": pause_agent, "db_restart": restart_database,
          "partition_leader": partition_leader, "partition_agent": partition_agent,
          "partition_db": partition_database, "controller_pause": pause_controllers}


def fault_kinds(controllers: int, postgres: bool, netns: bool) -> list[str]:
    kinds = ["leader_kill", "agent_kill", "agent_pause"]
    if controllers > 1:
        kinds += ["leader_pause", "standby_kill"]
    if postgres:
        kinds.append("db_restart")
    if netns:
        kinds += ["partition_leader", "partition_agent"] + (["partition_db"] if postgres else [])
    return kinds


# ----- one round


class Submitter(threading.Thread):
    """Submits the round's jobs through the leader, recording which were surely accepted and which may
    have been (the reply was lost after the request went out: never resent, so never submitted twice)."""

    def __init__(self, cluster: ChaosCluster, bodies: list[dict], rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.cluster, self.bodies, self.rng = cluster, bodies, rng
        self.accepted: list[int] = []
        self.ambiguous = 0
        self.refused: list[str] = []

    def run(self) -> None:
        for body in self.bodies:
            try:
                reply = self.cluster.call("POST", "/jobs", json=body, timeout_s=60.0)
            except (httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError):
                self.ambiguous += 1
                continue
            if reply.status_code == 201:
                self.accepted.append(reply.json()["job_id"])
            else:
                self.refused.append(f"{reply.status_code} {reply.text[:200]}")
            time.sleep(self.rng.uniform(0.0, 0.3))


def _records(cluster: ChaosCluster) -> dict[int, dict]:
    reply = cluster.call("GET", "/accounting", params={"limit": 100000})
    reply.raise_for_status()
    return {job["id"]: {**job, "nodes": expand(job["nodelist"]) if job["nodelist"] else []} for job in reply.json()}


def _drain(cluster: ChaosCluster) -> dict[int, dict]:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        records = _records(cluster)
        if all(r["state"] in FINAL_STATES for r in records.values()) or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def _orphans(marks: Path) -> list[str]:
    """Processes of the round's jobs still alive after every job ended."""
    found = subprocess.run(["pgrep", "-af", str(marks)], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


def run_round(root: Path, db_url: str, args: argparse.Namespace, faults: int, rng: random.Random,
              net: VirtualNetwork | None, database: Database | None) -> RoundResult:
    marks, workdir = root / "marks", root / "work"
    for directory in (marks, workdir / "out"):
        directory.mkdir(parents=True)
    cluster = ChaosCluster(root, db_url, controllers=args.controllers, nodes=args.nodes, gpus=args.gpus, net=net,
                           database=database).start()
    kinds = args.kinds or fault_kinds(args.controllers, database is not None, net is not None)
    try:
        shapes = random_shapes(rng, args.jobs_per_round, args.nodes, args.gpus)
        submitter = Submitter(cluster, [s.body(marks, workdir, "root") for s in shapes], rng)
        submitter.start()
        records: list[FaultRecord] = []
        unavailable: list[Violation] = []
        for _ in range(faults):
            time.sleep(rng.uniform(0.3, 2.0))
            cluster.revive()
            kind = rng.choice(kinds)
            try:
                records.append(FAULTS[kind](cluster, rng))
            except TimeoutError as exc:  # no leader, or a node not back, long after the fault: a violation
                records.append(FaultRecord(kind, "timed out", time.time()))
                unavailable.append(Violation("unavailable", 0, f"{kind}: {exc}"))
                cluster.heal()
        submitter.join()
        cluster.heal()
        cluster.wait_nodes_up(60.0)
        final = _drain(cluster)
    finally:
        cluster.stop()
    (root / "records.json").write_text(json.dumps({"accepted": submitter.accepted, "records": final,
                                                   "faults": [dataclasses.asdict(f) for f in records]}, indent=1))
    incarnations = read_markers(marks)
    violations = check(submitter.accepted, final, incarnations)
    violations += [Violation("not_final", j, f"still {r['state']} after the run drained")
                   for j, r in final.items() if r["state"] not in FINAL_STATES and j not in submitter.accepted]
    violations += [Violation("orphan", 0, line) for line in _orphans(marks)]
    violations += [Violation("refused", 0, text) for text in submitter.refused]
    violations += unavailable
    violations += [Violation("killed_by_pause", job_id, f"running in run {fault.running[job_id]} when {fault.target} "
                             "were paused, it lost that run") for fault in records for job_id in fault.killed]
    return RoundResult(records, len(submitter.accepted), submitter.ambiguous,
                       Counter(r["state"] for r in final.values()), violations,
                       sum(r.get("restart_count", 0) for r in final.values()), len(redone(incarnations)))


# ----- the report


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _recoveries(faults: list[FaultRecord], *kinds: str) -> list[float]:
    return [f.recovery_s for f in faults if f.kind in kinds and f.recovery_s is not None]


def summarize(rounds: list[RoundResult]) -> dict:
    faults = [f for r in rounds for f in r.faults]
    by_kind = Counter(f.kind for f in faults)
    failover = _recoveries(faults, "leader_kill", "leader_pause", "partition_leader")
    reconcile = _recoveries(faults, "agent_kill", "agent_pause", "partition_agent")
    violations = [v for r in rounds for v in r.violations]
    return {
        "rounds": len(rounds), "faults": len(faults), "faults_by_kind": dict(sorted(by_kind.items())),
        "jobs_accepted": sum(r.accepted for r in rounds), "submissions_unknown": sum(r.ambiguous for r in rounds),
        "job_states": dict(sorted(sum((r.states for r in rounds), Counter()).items())),
        "requeues": sum(r.requeues for r in rounds), "jobs_redone": sum(r.redone for r in rounds),
        "double_runs": sum(1 for v in violations if v.kind == "twice"),
        "controller_pauses_s": [f.lasted_s for f in faults if f.kind == "controller_pause"],
        "agent_partitions_past_node_timeout": sum(1 for f in faults if f.kind == "partition_agent"
                                                  and (f.lasted_s or 0.0) > NODE_TIMEOUT_S),
        "jobs_running_at_pauses": sum(len(f.running) for f in faults if f.kind == "controller_pause"),
        "jobs_killed_by_pauses": sum(len(f.killed) for f in faults if f.kind == "controller_pause"),
        "violations": len(violations), "violations_by_kind": dict(Counter(v.kind for v in violations)),
        "violation_details": [dataclasses.asdict(v) for v in violations[:50]],
        "failover_s": {"n": len(failover), "p50": percentile(failover, 50), "p99": percentile(failover, 99)},
        "agent_reconcile_s": {"n": len(reconcile), "p50": percentile(reconcile, 50), "p99": percentile(reconcile, 99)},
    }


def _fresh_database(root: Path, database: Database | None):
    if database is None:
        return nullcontext(f"sqlite:///{root / 'corral.db'}")
    from tests.store.pg import fresh_pg_schema

    return fresh_pg_schema(database.start())


@contextmanager
def _world(args: argparse.Namespace) -> Iterator[tuple[VirtualNetwork | None, Database | None]]:
    """The virtual hosts (with --netns) and the suite's PostgreSQL (with --db postgresql), for all rounds."""
    net = None
    if args.netns:
        if reason := unavailable_reason():
            raise SystemExit(f"--netns: {reason}")
        hosts = ["db", *(f"ctl{i}" for i in range(1, args.controllers + 1)),
                 *(f"node{i}" for i in range(1, args.nodes + 1))]
        net = VirtualNetwork(hosts).create()
    database = Database(net, net.tag if net else "loopback") if args.db == "postgresql" else None
    try:
        yield net, database
    finally:
        if database is not None and net is not None:
            database.stop()  # its address dies with the network
        if net is not None:
            net.destroy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=200, help="faults to inject in all (default 200)")
    parser.add_argument("--faults-per-round", type=int, default=10)
    parser.add_argument("--jobs-per-round", type=int, default=40)
    parser.add_argument("--controllers", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--db", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--netns", action="store_true", help="every daemon on a virtual host; partitions too")
    parser.add_argument("--kinds", type=lambda text: text.split(","), default=None,
                        help=f"only these faults, comma-separated, of: {', '.join(FAULTS)}")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--keep", action="store_true", help="keep each round's files (logs, markers)")
    args = parser.parse_args(argv)
    if args.controllers > 1 and args.db != "postgresql":
        parser.error("--controllers > 1 needs --db postgresql")
    if args.kinds and set(args.kinds) - set(FAULTS):
        parser.error(f"unknown fault kind(s): {', '.join(sorted(set(args.kinds) - set(FAULTS)))}")
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    with _world(args) as (net, database):
        rounds = _rounds(args, rng, net, database, seed)
    report = {"seed": seed, "controllers": args.controllers, "db": args.db, "netns": args.netns, "complete": True,
              **summarize(rounds)}
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 1 if report["violations"] else 0


def _rounds(args: argparse.Namespace, rng: random.Random, net: VirtualNetwork | None,
            database: Database | None, seed: int) -> list[RoundResult]:
    rounds: list[RoundResult] = []
    left = args.faults
    while left > 0:
        count = min(left, args.faults_per_round)
        root = Path(tempfile.mkdtemp(prefix="corral-chaos-"))
        with _fresh_database(root, database) as db_url:
            result = run_round(root, db_url, args, count, rng, net, database)
        rounds.append(result)
        left -= count
        if args.json:  # the figures so far, should the run be stopped before its end
            report = {"seed": seed, "controllers": args.controllers, "db": args.db, "netns": args.netns,
                      "complete": left <= 0, **summarize(rounds)}
            args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"round {len(rounds)}: {count} faults ({', '.join(f.kind for f in result.faults)}), "
              f"{result.accepted} jobs, {len(result.violations)} violations"
              + ("" if not result.violations else f" — files kept in {root}"), flush=True)
        if not args.keep and not result.violations:
            subprocess.run(["rm", "-rf", str(root)], check=False)
    return rounds


if __name__ == "__main__":
    sys.exit(main())
