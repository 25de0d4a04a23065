"""GPU fragmentation from node-level snapshots, in the sense of the FGD paper (Weng et al., ATC'23).

Idle GPU capacity is "fragmented" for a task when the task cannot use it: all of a node's free GPU
share when the task does not fit on that node, and otherwise the free share of GPUs too small for
the task's per-GPU request. The cluster's fragmentation is the expectation over a task mix (task
shape -> probability, by default the workload's own mix), summed over nodes. CPU and memory are
left out: this measures GPU fragmentation only.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from corral.sim.workload import GPU_MILLI_WHOLE, TraceJob

# A task shape: (GPUs per node, per-GPU milli). (1, 460) is 46 % of one GPU; (8, 1000) a full node.
TaskShape = tuple[int, int]


@dataclass(frozen=True, slots=True)
class NodeGpus:
    name: str
    free_gpu_milli: tuple[int, ...]  # per GPU on the node: 1000 = idle, 0 = fully used


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Free GPU share per node at one moment (the simulator takes one whenever placements change)."""

    time_s: float
    nodes: tuple[NodeGpus, ...]


@dataclass(frozen=True, slots=True)
class FragmentationPoint:
    time_s: float
    free_gpu_milli: int
    frag_gpu_milli: float

    @property
    def frag_pct_of_free(self) -> float:
        return 100.0 * self.frag_gpu_milli / self.free_gpu_milli if self.free_gpu_milli else 0.0


def task_mix(jobs: Iterable[TraceJob]) -> dict[TaskShape, float]:
    """The GPU task shapes of `jobs`, weighted by how often they occur (CPU-only jobs left out)."""
    counts = Counter((j.gpus_per_node, j.gpu_milli) for j in jobs if j.gpus_per_node and j.gpu_milli)
    total = sum(counts.values())
    return {shape: count / total for shape, count in counts.items()} if total else {}


def node_fragmentation_milli(free_gpu_milli: tuple[int, ...], shape: TaskShape) -> float:
    gpus, milli = shape
    if milli >= GPU_MILLI_WHOLE:
        fits = sum(1 for f in free_gpu_milli if f >= GPU_MILLI_WHOLE) >= gpus
    else:
        fits = any(f >= milli for f in free_gpu_milli)
    if not fits:
        return float(sum(free_gpu_milli))
    return float(sum(f for f in free_gpu_milli if f < milli))


def fragmentation(snapshot: ClusterSnapshot, mix: dict[TaskShape, float]) -> FragmentationPoint:
    frag = 0.0
    for node in snapshot.nodes:
        if any(node.free_gpu_milli):
            frag += sum(p * node_fragmentation_milli(node.free_gpu_milli, s) for s, p in mix.items())
    free = sum(sum(n.free_gpu_milli) for n in snapshot.nodes)
    return FragmentationPoint(snapshot.time_s, free, frag)


def fragmentation_series(snapshots: Iterable[ClusterSnapshot],
                         mix: dict[TaskShape, float]) -> list[FragmentationPoint]:
    if mix and abs(sum(mix.values()) - 1.0) > 1e-6:
        raise ValueError(f"task mix probabilities add up to {sum(mix.values())}, not 1")
    return [fragmentation(s, mix) for s in snapshots]
