"""Where a gang fits: per-node working state for one cycle, best-fit node choice, and device choice.

`Pool` is the cycle's mutable working copy of the cluster (built from the immutable snapshot, thrown away
after the cycle). Nodes sit in buckets by free GPU count per partition, so best fit (the fewest free GPUs
that still fit) is a short walk up the buckets instead of a sort per job.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from corral.core.model import Gpu, NodeSlice, NodeView


@dataclass(slots=True)
class Need:
    """What a gang needs on each of its nodes, and for how long."""

    gpus: int
    cpus: int
    mem_mib: int


@dataclass(slots=True)
class WorkNode:
    index: int
    name: str
    gpus: tuple[Gpu, ...]
    cpus: int
    mem_mib: int
    free: set[int]
    free_cpus: int
    free_mem_mib: int
    partitions: frozenset[str]
    gpu_model: str = ""
    # Resources coming back later: (time, gpus, cpus, mem_mib, job id), from running jobs and jobs
    # started this cycle. Times are never earlier than now + a small epsilon (see Pool.release_time).
    releases: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    # Reservations held for blocked jobs: (start, end, gpus, cpus, mem_mib).
    blocks: list[tuple[float, float, int, int, int]] = field(default_factory=list)
    # Advance reservations covering the whole node: (start, end, name, maintenance).
    advance: list[tuple[float, float, str, bool]] = field(default_factory=list)

    def capacity_fits(self, need: Need) -> bool:
        return len(self.gpus) >= need.gpus and self.cpus >= need.cpus and self.mem_mib >= need.mem_mib

    def fits_now(self, need: Need) -> bool:
        return len(self.free) >= need.gpus and self.free_cpus >= need.cpus and self.free_mem_mib >= need.mem_mib

    def available_at(self, when: float) -> tuple[int, int, int]:
        """Free (gpus, cpus, mem) at `when`, counting releases due by then and reservations active then."""
        g, c, m = len(self.free), self.free_cpus, self.free_mem_mib
        for t, rg, rc, rm, _ in self.releases:
            if t <= when:
                g, c, m = g + rg, c + rc, m + rm
        for start, end, bg, bc, bm in self.blocks:
            if start <= when < end:
                g, c, m = g - bg, c - bc, m - bm
        return g, c, m

    def usable(self, start: float, end: float, reservation: str) -> bool:
        """No advance reservation the job may not use overlaps [start, end) here."""
        for a_start, a_end, name, maintenance in self.advance:
            if a_start < end and a_end > start and (maintenance or name != reservation):
                return False
        return True

    def fits_window(self, need: Need, start: float, end: float, reservation: str = "") -> bool:
        """Does `need` fit from `start` (which must be now) until `end` without eating a reservation?"""
        if not self.fits_now(need):
            return False
        if self.advance and not self.usable(start, end, reservation):
            return False
        for b_start, b_end, *_ in self.blocks:
            if b_end <= start or b_start >= end:
                continue
            g, c, m = self.available_at(max(b_start, start))
            if g < need.gpus or c < need.cpus or m < need.mem_mib:
                return False
        return True


def choose_devices(node: WorkNode, count: int) -> tuple[int, ...]:
    """Pick `count` free devices, keeping them inside as few topology domains as possible.

    A domain that can hold the whole request on its own is preferred, the tightest such domain first
    (best fit, so big islands stay whole for big requests); otherwise the fullest domains are used first.
    """
    if count == 0:
        return ()
    by_domain: dict[str | None, list[int]] = {}
    for gpu in node.gpus:
        if gpu.index in node.free:
            by_domain.setdefault(gpu.domain, []).append(gpu.index)
    groups = sorted(by_domain.values(), key=lambda g: (len(g), g[0]))
    for group in groups:
        if len(group) >= count:
            return tuple(group[:count])
    chosen: list[int] = []
    for group in reversed(groups):
        chosen.extend(group[: count - len(chosen)])
        if len(chosen) == count:
            break
    return tuple(sorted(chosen))


class Pool:
    """The cycle's working copy of node capacity."""

    def __init__(self, nodes: tuple[NodeView, ...], now: float) -> None:
        self.now = now
        self.nodes: list[WorkNode] = []
        self.by_name: dict[str, WorkNode] = {}
        # partition -> buckets[free gpu count] -> insertion-ordered set of schedulable node indices
        self.buckets: dict[str, list[dict[int, None]]] = {}
        self.members: dict[str, list[WorkNode]] = {}
        # Built once per cycle for every node: kept to plain loops (this is the cycle's fixed cost).
        nodes_list, by_name, members, buckets = self.nodes, self.by_name, self.members, self.buckets
        for index, view in enumerate(nodes):
            gpus = view.gpus
            node = WorkNode(index, view.name, gpus, view.cpus, view.mem_mib, set(view.free_gpus), view.free_cpus,
                            view.free_mem_mib, view.partitions, gpus[0].model if gpus else "")
            nodes_list.append(node)
            by_name[view.name] = node
            free = len(node.free)
            for part in view.partitions:
                group = members.get(part)
                if group is None:
                    group = members[part] = []
                if view.schedulable:
                    group.append(node)
                    part_buckets = buckets.get(part)
                    if part_buckets is None:
                        part_buckets = buckets[part] = []
                    while len(part_buckets) <= free:
                        part_buckets.append({})
                    part_buckets[free][index] = None

    def release_time(self, expected_end: float) -> float:
        # A job past its expected end is being killed: its resources are not free now, but soon.
        return max(expected_end, self.now + 1.0)

    def _bucket(self, partition: str, free_gpus: int) -> dict[int, None]:
        buckets = self.buckets.setdefault(partition, [])
        while len(buckets) <= free_gpus:
            buckets.append({})
        return buckets[free_gpus]

    def find_now(self, partition: str, need: Need, count: int, end: float,
                 reservation: tuple[str, frozenset[str]] | None = None, model: str = "") -> list[WorkNode] | None:
        """Best-fit choice of `count` nodes where `need` fits from now until `end`, or None.
        A job in an advance reservation (name, nodes) is confined to the reservation's nodes; `model`
        confines it to nodes with that GPU model."""
        buckets = self.buckets.get(partition)
        if not buckets:
            return None
        name, allowed = reservation if reservation else ("", None)
        chosen: list[WorkNode] = []
        for free_gpus in range(need.gpus, len(buckets)):
            for index in buckets[free_gpus]:
                node = self.nodes[index]
                if allowed is not None and node.name not in allowed:
                    continue
                if model and node.gpu_model != model:
                    continue
                if node.fits_window(need, self.now, end, name):
                    chosen.append(node)
                    if len(chosen) == count:
                        return chosen
        return None

    def take(self, node: WorkNode, need: Need, end: float, job_id: int) -> NodeSlice:
        piece = NodeSlice(node=node.name, gpus=choose_devices(node, need.gpus), cpus=need.cpus, mem_mib=need.mem_mib)
        self.occupy(piece, job_id, end)
        return piece

    def occupy(self, piece: NodeSlice, job_id: int, end: float) -> None:
        node = self.by_name[piece.node]
        before = len(node.free)
        node.free.difference_update(piece.gpus)
        node.free_cpus -= piece.cpus
        node.free_mem_mib -= piece.mem_mib
        node.releases.append((self.release_time(end), len(piece.gpus), piece.cpus, piece.mem_mib, job_id))
        self._rebucket(node, before)

    def release(self, piece: NodeSlice, job_id: int) -> None:
        """Give a running job's slice back now (what-if for preemption; `occupy` undoes it)."""
        node = self.by_name[piece.node]
        before = len(node.free)
        node.free.update(piece.gpus)
        node.free_cpus += piece.cpus
        node.free_mem_mib += piece.mem_mib
        node.releases = [r for r in node.releases if r[4] != job_id]
        self._rebucket(node, before)

    def _rebucket(self, node: WorkNode, before: int) -> None:
        after = len(node.free)
        if after == before:
            return
        for part in node.partitions:
            buckets = self.buckets.get(part)
            if buckets is not None and node.index in buckets[before]:
                del buckets[before][node.index]
                self._bucket(part, after)[node.index] = None
