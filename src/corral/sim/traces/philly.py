"""Microsoft Philly (2017), as processed for the Pollux/Sia simulators, and its virtual clusters.

`philly_sia_pollux_jobs.csv.gz` has `timestamp,duration,num_gpus,gpu_time,cluster`: submit time
(naive, read as UTC), runtime in seconds, GPU count, GPU seconds and the virtual cluster (VC) hash.
No user, state or time limit: each VC is one tenant (user = account = queue = VC), and time limits
are left unknown for `corral.sim.limits` to model.

Shapes: a job gets the fewest 8-GPU nodes that hold it ("consolidate", as the Helios simulator
placed Philly jobs): up to 8 GPUs on one node, 16 = 2 x 8, 24 = 3 x 8, 32 = 4 x 8. corral gangs give
every node the same slice, so a count above 8 that is not a multiple of 8 is spread evenly over
ceil(n/8) nodes when it divides (12 = 2 x 6: the same 2 nodes Helios uses, 6 + 6 instead of
8 + 4), and rounded up per node otherwise (over-allocating; recorded in the workload's notes).
In the Helios window only 12-GPU jobs are affected: 7 of them, all 2 x 6, none over-allocated.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable
from datetime import datetime, timezone

from corral.sim.traces._csv import TRACES_DIR, Row, iter_rows
from corral.sim.workload import GPU_MILLI_WHOLE, Cluster, TraceJob, Workload

JOBS_PATH = TRACES_DIR / "philly-derived" / "philly_sia_pollux_jobs.csv.gz"
VC_PATH = TRACES_DIR / "philly-derived" / "philly_vc.csv"
GPUS_PER_NODE = 8
# The Helios paper's window: submissions in [2017-10-01, 2017-12-01), i.e. through 2017-11-30.
WINDOW_START = "2017-10-01 00:00:00"
WINDOW_END = "2017-12-01 00:00:00"
# Philly's per-node CPU and memory are not in the trace; generous values so GPUs are what binds.
NODE_CPUS = 48
NODE_MEM_MIB = 512 * 1024

_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
_REQUIRED = ("timestamp", "duration", "num_gpus", "cluster")


def read_vcs(path: str | os.PathLike[str] = VC_PATH) -> dict[str, int]:
    """VC name -> node count (8 GPUs each), in file order."""
    vcs: dict[str, int] = {}
    for row in iter_rows(path, ("vc", "node num")):
        name = row.text("vc")
        if not name or name in vcs:
            raise row.error(f"VC name {name!r} empty or repeated")
        vcs[name] = row.integer("node num", minimum=1)
    return vcs


def philly_cluster(path: str | os.PathLike[str] = VC_PATH, *, cpus_per_node: int = NODE_CPUS,
                   mem_per_node_mib: int = NODE_MEM_MIB) -> Cluster:
    """The 11 Helios VCs as partitions of identical 8-GPU nodes (2,816 GPUs in all)."""
    cluster = Cluster.uniform("philly", read_vcs(path), gpus_per_node=GPUS_PER_NODE,
                              cpus_per_node=cpus_per_node, mem_per_node_mib=mem_per_node_mib,
                              source=f"{path}: VC node counts as the Helios simulator used them")
    return cluster


def consolidated_shape(num_gpus: int, gpus_per_node: int = GPUS_PER_NODE) -> tuple[int, int]:
    """(nodes, GPUs per node) on the fewest nodes; uneven counts are spread (rounded up per node)."""
    if num_gpus <= gpus_per_node:
        return 1, num_gpus
    nodes = math.ceil(num_gpus / gpus_per_node)
    return nodes, math.ceil(num_gpus / nodes)


def read_philly(path: str | os.PathLike[str] = JOBS_PATH, *, vc_path: str | os.PathLike[str] | None = VC_PATH,
                vcs: Iterable[str] | None = None, start: str = WINDOW_START, end: str = WINDOW_END,
                cpus_per_gpu: int = 1, mem_per_gpu_mib: int = 0) -> Workload:
    """Jobs submitted in [start, end) to the chosen VCs (default: those of `vc_path`; both None: all).

    submit_s counts from `start`. Job ids are the 0-based data-row index in the file, so a job keeps
    its id whatever the window. CPU and memory requests scale with the GPU count (the trace has none).
    """
    chosen = set(vcs) if vcs is not None else (set(read_vcs(vc_path)) if vc_path is not None else None)
    start_epoch_s, end_epoch_s = _epoch_s(start), _epoch_s(end)
    jobs: list[TraceJob] = []
    uneven: dict[int, tuple[int, int]] = {}
    for index, row in enumerate(iter_rows(path, _REQUIRED)):
        vc = row.text("cluster")
        if chosen is not None and vc not in chosen:
            continue
        submit_epoch_s = _row_epoch_s(row)
        if not start_epoch_s <= submit_epoch_s < end_epoch_s:
            continue
        job = _job(row, index, submit_epoch_s - start_epoch_s, vc, cpus_per_gpu, mem_per_gpu_mib)
        if job.total_gpus != row.integer("num_gpus") or (job.num_nodes > 1 and job.gpus_per_node != GPUS_PER_NODE):
            uneven[row.integer("num_gpus")] = (job.num_nodes, job.gpus_per_node)
        jobs.append(job)
    notes = [f"each job on the fewest {GPUS_PER_NODE}-GPU nodes (consolidated); user = account = queue = VC"]
    notes += _uneven_notes(jobs, uneven)
    source = (f"{path}: Philly jobs submitted in [{start}, {end}) UTC"
              + (f", VCs {', '.join(sorted(chosen))}" if chosen is not None else ", all VCs"))
    return Workload(tuple(jobs), "philly", source, origin_epoch_s=start_epoch_s, notes=tuple(notes))


def _job(row: Row, index: int, submit_s: float, vc: str, cpus_per_gpu: int, mem_per_gpu_mib: int) -> TraceJob:
    num_gpus = row.integer("num_gpus", minimum=1)
    nodes, per_node = consolidated_shape(num_gpus)
    return TraceJob(
        id=index, submit_s=submit_s, duration_s=row.number("duration"), num_nodes=nodes,
        gpus_per_node=per_node, gpu_milli=GPU_MILLI_WHOLE, cpus_per_node=max(1, per_node * cpus_per_gpu),
        mem_per_node_mib=per_node * mem_per_gpu_mib, gpu_model=None, user=vc, account=vc, queue=vc,
        time_limit_s=None, name=f"philly-{index}",
    )


def _uneven_notes(jobs: list[TraceJob], uneven: dict[int, tuple[int, int]]) -> list[str]:
    notes = []
    for num_gpus, (nodes, per_node) in sorted(uneven.items()):
        count = sum(1 for j in jobs if j.num_nodes == nodes and j.gpus_per_node == per_node)
        extra = nodes * per_node - num_gpus
        how = f"over-allocated by {extra} GPU(s)" if extra else "spread evenly"
        notes.append(f"{count} job(s) of {num_gpus} GPUs shaped {nodes} nodes x {per_node} GPUs ({how})")
    return notes


def _row_epoch_s(row: Row) -> float:
    raw = row.text("timestamp")
    try:
        return datetime.strptime(raw, _TIME_FORMAT).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise row.error(f"column 'timestamp': {raw!r} is not 'YYYY-MM-DD HH:MM:SS'") from None


def _epoch_s(text: str) -> float:
    """A window bound: 'YYYY-MM-DD' or 'YYYY-MM-DD HH:MM:SS', UTC."""
    fmt = _TIME_FORMAT if " " in text else "%Y-%m-%d"
    return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc).timestamp()
