"""Synthetic cluster states shared by the scheduler benchmarks (deterministic for a given seed)."""
from __future__ import annotations

import random

from corral.core.model import Gpu, NodeSlice, NodeView, Partition, PendingJob, Request, RunningJob
from corral.core.snapshot import Snapshot

NOW = 1_700_000_000.0
# (nodes, gpus per node, weight): 1 GPU up to 64-GPU gangs of 8 x 8
SHAPES = [(1, 1, 40), (1, 2, 15), (1, 4, 15), (1, 8, 15), (2, 8, 8), (4, 8, 5), (8, 8, 2)]
LIMITS_S = [600, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600]


def _request(rng: random.Random) -> Request:
    nodes, gpus, _ = rng.choices(SHAPES, weights=[w for *_, w in SHAPES])[0]
    return Request(num_nodes=nodes, tasks_per_node=gpus, gpus_per_node=gpus, cpus_per_task=4,
                   mem_per_node_mib=gpus * 32 * 1024, time_limit_s=rng.choice(LIMITS_S), partition="gpu")


def cluster_snapshot(num_nodes: int, pending: int, busy_fraction: float = 0.9, seed: int = 1) -> Snapshot:
    """`num_nodes` x 8-GPU nodes, about `busy_fraction` of GPUs held by running jobs, and `pending` jobs."""
    rng = random.Random(seed)
    names = [f"node{i:04d}" for i in range(num_nodes)]
    free = {n: list(range(8)) for n in names}
    cpus_free = {n: 128 for n in names}
    mem_free = {n: 2_048_000 for n in names}
    running: list[RunningJob] = []
    target = int(busy_fraction * 8 * num_nodes)
    used = 0
    job_id = 1
    while used < target:
        gpus = rng.choice([1, 2, 4, 8])
        name = rng.choice(names)
        if len(free[name]) < gpus:
            continue
        devices = tuple(free[name][:gpus])
        del free[name][:gpus]
        cpus_free[name] -= 4 * gpus
        mem_free[name] -= gpus * 32 * 1024
        ends = NOW + rng.uniform(60, 24 * 3600)
        running.append(RunningJob(job_id, ends, (NodeSlice(name, devices, 4 * gpus, gpus * 32 * 1024),)))
        used += gpus
        job_id += 1
    nodes = tuple(
        NodeView(name=n, gpus=tuple(Gpu(i, "H100", 81920, f"nvl{i // 4}") for i in range(8)), cpus=128,
                 mem_mib=2_048_000, free_gpus=frozenset(free[n]), free_cpus=cpus_free[n],
                 free_mem_mib=mem_free[n], partitions=frozenset({"gpu"}))
        for n in names)
    jobs = tuple(
        PendingJob(id=job_id + i, priority=rng.choice([0, 0, 0, 10, 100]), submit_time=NOW - rng.uniform(0, 86400),
                   request=_request(rng))
        for i in range(pending))
    return Snapshot(now=NOW, nodes=nodes, partitions=(Partition("gpu", max_time_s=7 * 86400, default=True),),
                    running=tuple(running), pending=jobs)
