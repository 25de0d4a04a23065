"""The cycle's working copy of the cluster (`WorkPool`) and what it shares with the engine's base pool
(`NodePool`: nodes and their free-capacity indexes, kept up to date as slices are taken and given back).

Nodes sit in buckets by free GPU count per partition, so best fit (the fewest free GPUs that still fit) is a
short walk up the buckets instead of a sort per job; nodes with shared devices are also indexed by the room
(free milli) of those devices. Which node and device a request gets is the pool's `Placement` (see
core/placement/), chosen once from the configuration; the pool tells it when a node's free resources change.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from corral.core.model import GPU_MILLI, NodeSlice, NodeView
from corral.core.timeline import FirstFits
from corral.core.worknode import Need, WorkNode, choose_devices

if TYPE_CHECKING:
    from corral.core.placement import Placement, PlacementPolicy


class NodePool:
    """Nodes and their indexes by free capacity. The pool owns its node records (see WorkPool.own)."""

    def __init__(self, nodes: tuple[NodeView, ...], now: float) -> None:
        self.now = now
        self.nodes: list[WorkNode] = []
        self.by_name: dict[str, WorkNode] = {}
        # partition -> buckets[free gpu count] -> insertion-ordered set of schedulable node indices
        self.buckets: dict[str, list[dict[int, None]]] = {}
        self.members: dict[str, list[WorkNode]] = {}
        # partition -> room (free milli of a shared device, 1..999) -> schedulable nodes with such a device
        self.rooms: dict[str, list[dict[int, None]]] = {}
        self.node_rooms: dict[int, frozenset[int]] = {}
        self._member_pos: dict[str, dict[int, int]] = {}  # partition -> node index -> place in members
        # Called when a schedulable node's free resources change: a working pool's placement keeps its own
        # index of the nodes by it (FGD's fragmentation states).
        self.moved: Callable[[WorkNode], None] = _unindexed
        # The backfill timeline's memo of when each node first holds a need (core/timeline.py: FirstFits);
        # a node's entries go whenever its free resources or releases change (occupy, release).
        self.first_fits: FirstFits = {}
        # A working pool's log of the nodes whose free resources, releases or blocks changed, in order (for
        # the sweeps' kept openings, core/timeline.py: Openings); None: not kept (the engine's base pool).
        self.changed: list[int] | None = []
        self._build(nodes)

    def _build(self, nodes: tuple[NodeView, ...]) -> None:
        # Done once per cycle for every node (unless forked): kept to plain loops, the cycle's fixed cost.
        nodes_list, by_name, members, buckets = self.nodes, self.by_name, self.members, self.buckets
        for index, view in enumerate(nodes):
            gpus = view.gpus
            node = WorkNode(index, view.name, gpus, view.cpus, view.mem_mib, set(view.free_gpus), view.free_cpus,
                            view.free_mem_mib, view.partitions, gpus[0].model if gpus else "")
            nodes_list.append(node)
            by_name[view.name] = node
            if not view.schedulable:
                node.schedulable = False
            free = len(node.free)
            for part in view.partitions:
                group = members.get(part)
                if group is None:
                    group = members[part] = []
                if view.schedulable:
                    self._member_pos.setdefault(part, {})[index] = len(group)
                    group.append(node)
                    part_buckets = buckets.get(part)
                    if part_buckets is None:
                        part_buckets = buckets[part] = []
                    while len(part_buckets) <= free:
                        part_buckets.append({})
                    part_buckets[free][index] = None
            if view.shared_gpus:
                node.shared.update(view.shared_gpus)
                node.free.difference_update(node.shared)
                if view.schedulable:
                    self._index_rooms(node)

    def own(self, node: WorkNode) -> WorkNode:
        """The record of `node` this pool may change: the node itself (a fork copies it first)."""
        return node

    def forget_fits(self, index: int) -> None:
        """The node's free resources or releases changed: its first-fit entries no longer hold."""
        self.first_fits.pop(index, None)

    def release_time(self, expected_end: float) -> float:
        # A job past its expected end is being killed: its resources are not free now, but soon.
        return max(expected_end, self.now + 1.0)

    def occupy(self, piece: NodeSlice, job_id: int, end: float) -> None:
        node = self.own(self.by_name[piece.node])
        self.forget_fits(node.index)
        if self.changed is not None:
            self.changed.append(node.index)
        before = len(node.free)
        if piece.gpu_milli < GPU_MILLI:
            shared = node.shared
            for g in piece.gpus:
                node.free.discard(g)
                shared[g] = shared.get(g, 0) + piece.gpu_milli
            whole = 0  # a shared device comes back only when its last sharer leaves: not planned on
        else:
            node.free.difference_update(piece.gpus)
            whole = len(piece.gpus)
        node.free_cpus -= piece.cpus
        node.free_mem_mib -= piece.mem_mib
        node.releases.append((self.release_time(end), whole, piece.cpus, piece.mem_mib, job_id))
        self._rebucket(node, before, piece.gpu_milli < GPU_MILLI)

    def release(self, piece: NodeSlice, job_id: int) -> None:
        """Give a running job's slice back now (what-if for preemption; `occupy` undoes it)."""
        node = self.own(self.by_name[piece.node])
        self.forget_fits(node.index)
        if self.changed is not None:
            self.changed.append(node.index)
        before = len(node.free)
        if piece.gpu_milli < GPU_MILLI:
            shared = node.shared
            for g in piece.gpus:
                used = shared.get(g, 0) - piece.gpu_milli
                if used > 0:
                    shared[g] = used
                else:
                    shared.pop(g, None)
                    node.free.add(g)
        else:
            node.free.update(piece.gpus)
        node.free_cpus += piece.cpus
        node.free_mem_mib += piece.mem_mib
        node.releases = [r for r in node.releases if r[4] != job_id]
        self._rebucket(node, before, piece.gpu_milli < GPU_MILLI)

    def block(self, node: WorkNode, start: float, end: float, gpus: int, cpus: int, mem_mib: int) -> None:
        """Set part of a node aside from `start` to `end` for a job that waits (a backfill reservation, a
        preemptor's hold)."""
        node = self.own(node)
        node.blocks.append((start, end, gpus, cpus, mem_mib))
        if self.changed is not None:
            self.changed.append(node.index)

    def _bucket(self, partition: str, free_gpus: int) -> dict[int, None]:
        buckets = self.buckets.setdefault(partition, [])
        while len(buckets) <= free_gpus:
            buckets.append({})
        return buckets[free_gpus]

    def _rebucket(self, node: WorkNode, before: int, shares: bool = False) -> None:
        if node.schedulable:
            if shares or node.index in self.node_rooms:
                self._index_rooms(node)
            self.moved(node)
        after = len(node.free)
        if after == before:
            return
        for part in node.partitions:
            buckets = self.buckets.get(part)
            # A node that is not schedulable (down, drained) is in no bucket, and may have more free GPUs
            # than any bucket list of its partitions reaches.
            if buckets is not None and before < len(buckets) and node.index in buckets[before]:
                del buckets[before][node.index]
                self._bucket(part, after)[node.index] = None

    def _index_rooms(self, node: WorkNode) -> None:
        """Keep the room index (shared devices by free milli) of a schedulable node up to date."""
        old = self.node_rooms.get(node.index, frozenset())
        new = frozenset(GPU_MILLI - u for u in node.shared.values() if u < GPU_MILLI)
        if old == new:
            return
        for part in node.partitions:
            rooms = self.rooms.get(part)
            if rooms is None:
                rooms = self.rooms[part] = [{} for _ in range(GPU_MILLI)]
            for room in old - new:
                rooms[room].pop(node.index, None)
            for room in new - old:
                rooms[room][node.index] = None
        if new:
            self.node_rooms[node.index] = new
        else:
            self.node_rooms.pop(node.index, None)


class WorkPool(NodePool):
    """One cycle's working copy of node capacity: built from the snapshot's node views, or forked from the
    engine's base pool (core/basepool.py) copy-on-write; thrown away after the cycle."""

    def __init__(self, nodes: tuple[NodeView, ...], now: float, placement: PlacementPolicy) -> None:
        super().__init__(nodes, now)
        self._owned: set[int] | None = None  # a pool built from views owns all its nodes
        self.attach(placement)

    def attach(self, placement: PlacementPolicy) -> None:
        """Give the pool its placement (which may index the pool's nodes now). The placement sees the pool
        through a weak proxy: a pool that held its placement and was held by it would be a reference cycle,
        which reference counting never frees. Every node a cycle's fork copied (about 29,000 objects in a
        cycle that starts 4,834 jobs at 10,000 nodes) would then wait for the collector, and its collection
        would walk them in the middle of a later cycle (bench/cycle.py's `collections_settled`)."""
        self.placement: Placement = placement(weakref.proxy(self))
        self.moved = self.placement.moved

    def own(self, node: WorkNode) -> WorkNode:
        """The record of `node` this pool may change (a fork copies it on first use)."""
        owned = self._owned
        if owned is None:
            return node
        index = node.index
        if index in owned:
            return self.nodes[index]
        node = self.nodes[index]
        # A fork shares the base's first-fit entries of the nodes it has not copied (core/basepool.py): the
        # copy, about to change, gets its own.
        self.first_fits.pop(index, None)
        copy = WorkNode(index, node.name, node.gpus, node.cpus, node.mem_mib, set(node.free), node.free_cpus,
                        node.free_mem_mib, node.partitions, node.gpu_model, list(node.releases), list(node.blocks),
                        list(node.advance), dict(node.shared), node.schedulable)
        self.nodes[index] = copy
        self.by_name[copy.name] = copy
        for part in copy.partitions:
            place = self._member_pos.get(part, {}).get(index)
            if place is not None:
                self.members[part][place] = copy
        owned.add(index)
        return copy

    def find_now(self, partition: str, need: Need, count: int, end: float,
                 reservation: tuple[str, frozenset[str] | None] | None = None,
                 model: str = "") -> list[WorkNode] | None:
        """The `count` nodes the placement chooses where `need` fits from now until `end`, or None. A job in
        an advance reservation (name, nodes) is confined to the reservation's nodes (nodes None: a hold, whose
        job may use its nodes and any other); `model` ("A" or "A|B") confines it to nodes with that GPU model."""
        return self.placement.find(partition, need, count, end, reservation, model)

    def take(self, node: WorkNode, need: Need, end: float, job_id: int) -> NodeSlice:
        gpus: tuple[int, ...]
        if need.gpu_milli < GPU_MILLI:
            gpus = (self.placement.shared_device(node, need),)
        else:
            gpus = choose_devices(node, need.gpus)
        piece = NodeSlice(node.name, gpus, need.cpus, need.mem_mib, need.gpu_milli)
        self.occupy(piece, job_id, end)
        return piece


def _unindexed(node: WorkNode) -> None:
    """No index of nodes beyond the pool's own (the engine's base pool, best fit)."""
