"""Every decision of one scheduling cycle over seeded mixed workloads, pinned by a digest recorded before the
cycle's fast paths for a long queue (issue 24): the starts with their nodes and devices, every waiting job's
reason, estimated start, reserved nodes and detail, every preemption, and the stats. A speed-up that changes
any decision changes a digest. The workloads mix what takes the cycle's different paths: plain jobs deep in a
long queue, held jobs, counted limits, cohort queues that lend and reclaim, a preempting QOS, exclusive jobs,
node lists, anti-affinity groups, advance reservations, fractions, two partitions and drained nodes; each is
scheduled from node views and from a forked base pool (the engine's way), under four configurations."""
from __future__ import annotations

import hashlib
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from corral.core.basepool import BasePool
from corral.core.config import SchedulerConfig
from corral.core.model import (
    AdvanceReservation,
    Cap,
    Gpu,
    NodeSlice,
    NodeView,
    Partition,
    PendingJob,
    QueueQuota,
    Reason,
    Request,
    RunningJob,
)
from corral.core.scheduler import schedule
from corral.core.snapshot import Snapshot

NOW = 1_700_000_000.0
CONFIGS = {"default": SchedulerConfig(), "easy": SchedulerConfig(max_reservations=1),
           "fifo": SchedulerConfig(backfill=False), "fgd": SchedulerConfig(placement="fgd", max_reservations=4)}


def mixed_snapshot(seed: int, num_nodes: int = 120, pending: int = 3000) -> Snapshot:
    rng = random.Random(seed)
    names = [f"node{i:03d}" for i in range(num_nodes)]
    part_of = {n: ("gpu",) if i % 5 else ("gpu", "debug") for i, n in enumerate(names)}
    free = {n: list(range(8)) for n in names}
    cpus = {n: 64 for n in names}
    mem = {n: 512_000 for n in names}
    shared: dict[str, dict[int, int]] = {n: {} for n in names}
    running: list[RunningJob] = []
    job_id = 1
    while sum(len(f) for f in free.values()) > 0.2 * 8 * num_nodes:
        n = rng.choice(names)
        if rng.random() < 0.05 and free[n]:
            g = free[n].pop()
            shared[n][g] = rng.choice((250, 500))
            piece = NodeSlice(n, (g,), 1, 1000, shared[n][g])
            running.append(RunningJob(job_id, NOW + rng.uniform(-30, 7200), (piece,)))
            job_id += 1
            continue
        want = rng.choice([1, 2, 4, 8])
        if len(free[n]) < want or cpus[n] < 4 * want:
            continue
        devices = tuple(free[n][:want])
        del free[n][:want]
        cpus[n] -= 4 * want
        mem[n] -= 16_000 * want
        queue = rng.choice(["", "", "qa", "qb", "qc"])
        running.append(RunningJob(
            job_id, NOW + rng.uniform(-30, 36_000), (NodeSlice(n, devices, 4 * want, 16_000 * want),),
            priority=rng.choice([0, 10]), queue=queue, qos=rng.choice(["", "low"]), start_time=NOW - 600,
            preemptible_from=NOW - 1 if rng.random() < 0.5 else None,
            charges=(("user:u1", 1),) if rng.random() < 0.2 else (), budget_group=rng.choice(["", "", "svc"])))
        job_id += 1
    drained = set(rng.sample(names, 3))
    nodes = tuple(NodeView(
        name=n, gpus=tuple(Gpu(i, "H100" if k % 3 else "A100", 81920, f"nvl{i // 4}") for i in range(8)),
        cpus=64, mem_mib=512_000, free_gpus=frozenset(free[n]), free_cpus=cpus[n], free_mem_mib=mem[n],
        partitions=frozenset(part_of[n]), schedulable=n not in drained, shared_gpus=tuple(sorted(shared[n].items())))
        for k, n in enumerate(names))
    resv_nodes = frozenset(names[10:14])
    reservations = (AdvanceReservation("train", NOW - 60, NOW + 7200, resv_nodes),
                    AdvanceReservation("maint", NOW + 1800, NOW + 3600, frozenset(names[20:22]), maintenance=True))
    queues = (QueueQuota("qa", {"gpu": 64}, cohort="lab"), QueueQuota("qb", {"gpu": 32}, cohort="lab"),
              QueueQuota("qc", {"gpu": 16, "cpu": 256}, cohort="lab", borrowing_limit={"gpu": 8}))
    jobs = []
    for i in range(pending):
        kind = rng.random()
        nodes_n, gpus = rng.choices([(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8), (8, 8)],
                                    weights=[40, 15, 15, 15, 8, 5, 2])[0]
        milli = rng.choice((250, 500)) if kind < 0.03 and gpus == 1 and nodes_n == 1 else 1000
        request = Request(num_nodes=nodes_n, tasks_per_node=gpus, gpus_per_node=gpus, cpus_per_task=4,
                          mem_per_node_mib=gpus * 16_000, time_limit_s=rng.choice([600, 1800, 3600, 14400, 86400]),
                          partition="debug" if rng.random() < 0.05 else "gpu",
                          gpu_model=rng.choice(["", "", "", "", "A100"]), gpu_milli=milli)
        more = _extras(rng, kind, names)
        jobs.append(PendingJob(id=job_id + i, priority=rng.choice([0, 0, 0, 10, 100]),
                               submit_time=NOW - rng.uniform(0, 86400), request=request, **more))
    parts = (Partition("gpu", max_time_s=7 * 86400, default=True), Partition("debug", max_time_s=3600))
    return Snapshot(now=NOW, nodes=nodes, partitions=parts, running=tuple(running), pending=tuple(jobs),
                    queues=queues, reservations=reservations, disruption_budgets={"svc": 2})


def _extras(rng: random.Random, kind: float, names: list[str]) -> dict[str, object]:
    """What besides its request a pending job carries, by `kind` (most jobs: nothing)."""
    more: dict[str, object] = {}
    if 0.03 <= kind < 0.06:
        more["held"] = True
    elif 0.06 <= kind < 0.12:
        more["caps"] = (Cap("user:u1", 40, 1, Reason.ASSOC_MAX_JOBS),)
    elif 0.12 <= kind < 0.27:
        more["queue"] = rng.choice(["qa", "qb", "qc"])
    elif 0.27 <= kind < 0.29:
        more["preempts_qos"] = frozenset({"low"})
        more["qos"] = "high"
    elif 0.29 <= kind < 0.30:
        more["exclusive"] = True
    elif 0.30 <= kind < 0.32:
        more["nodes"] = frozenset(rng.sample(names, 6))
    elif 0.32 <= kind < 0.34:
        more["group"], more["max_per_node"] = "svc", 1
    elif 0.34 <= kind < 0.36:
        more["reservation"] = "train"
    return more


def with_base(snap: Snapshot) -> Snapshot:
    base = BasePool(snap.nodes)
    for job in snap.running:
        base.note_running(job.id, job.slices, job.expected_end)
    return replace(snap, base=base)


def bench_snapshot() -> Snapshot:
    """bench/workload.py's Philly-like mix (what `make bench`'s cycle figure schedules), at 300 nodes."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        from workload import cluster_snapshot
    finally:
        sys.path.pop(0)
    return cluster_snapshot(300, 10_000)


def digest(snap: Snapshot, config: SchedulerConfig) -> str:
    plan = schedule(snap, config)
    text = repr((plan.starts, plan.waiting, plan.preemptions, sorted(plan.stats.items())))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


PINNED = {  # recorded with the cycle before its fast paths (commit "cycle: pin decisions ...")
    (1, "default"): "bf2599bf0c87e0c8", (1, "easy"): "e75d61732107a5bc", (1, "fifo"): "c4e18f783125153f",
    (1, "fgd"): "0361405c02382a63", (2, "default"): "5a304ffa7baf7224", (2, "easy"): "6b83474584f228d7",
    (2, "fifo"): "025da91600325b68", (2, "fgd"): "5809cc31593383e3", (3, "default"): "5eb5b173fdd1a2d0",
    (3, "easy"): "0c81db3f389339eb", (3, "fifo"): "3f02be5d4d751bd5", (3, "fgd"): "d434fe73596f5fa8",
    ("bench", "default"): "e36b6188061323ef",
}


CASES = [(seed, config) for seed in (1, 2, 3) for config in CONFIGS]


@pytest.mark.parametrize("seed,config", CASES)
def test_mixed_workload_decisions_are_pinned(seed: int, config: str) -> None:
    snap = mixed_snapshot(seed)
    views = digest(snap, CONFIGS[config])
    assert digest(with_base(snap), CONFIGS[config]) == views
    assert views == PINNED[(seed, config)]


def test_bench_mix_decisions_are_pinned() -> None:
    snap = bench_snapshot()
    views = digest(snap, SchedulerConfig())
    assert digest(with_base(snap), SchedulerConfig()) == views
    assert views == PINNED[("bench", "default")]
