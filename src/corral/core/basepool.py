"""The engine's incremental base pool (`Snapshot.base`): the nodes' free capacity and the running jobs'
releases, kept between cycles job by job, so that a cycle forks it (copy-on-write) instead of building its
working pool from every node view.

A fork never writes into the base's nodes or indexes. Three things are shared on purpose, all safe: the
base's heap of raw expected ends (only `fork` and the base's own methods move it); `StaticReasons`, a
memo the cycles fill: a static reason depends only on what the base holds fixed for its whole life (nodes'
capacity, partitions and schedulability: a node change makes the engine build a new base) and on the
partition table, which keys the memo; and each node's first-fit entries (`first_fits`, core/timeline.py:
when the node first holds a need), which a fork fills only for nodes it has not copied, whose state is the
base's, and which the base renews whenever it changes the node.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from corral.core.model import GPU_MILLI, NodeSlice, NodeView, Partition, Reason
from corral.core.pool import NodePool, WorkPool

if TYPE_CHECKING:
    from corral.core.placement import PlacementPolicy


class StaticReasons:
    """(request shape, GPU model) -> the reason no amount of waiting fixes (None: there is none), for one
    set of nodes and one partition table."""

    def __init__(self) -> None:
        self._partitions: tuple[Partition, ...] | None = None
        self._memo: dict[tuple[object, ...], Reason | None] = {}

    def memo(self, partitions: tuple[Partition, ...]) -> dict[tuple[object, ...], Reason | None]:
        """The memo for this partition table (emptied when the table changed)."""
        if partitions != self._partitions:
            self._partitions, self._memo = partitions, {}
        return self._memo


class BasePool(NodePool):
    def __init__(self, nodes: tuple[NodeView, ...]) -> None:
        super().__init__(nodes, float("-inf"))
        self.changed = None  # the base lives across cycles: no log of its changes
        # job id -> (raw expected end, slices), and the ends that a fork must move to now + 1 (jobs past
        # their expected end).
        self._held: dict[int, tuple[float, tuple[NodeSlice, ...]]] = {}
        self._ends: list[tuple[float, int]] = []
        self._late: dict[int, float] = {}
        self.static_reasons = StaticReasons()
        # Every node has its entries (empty at first) for the forks to fill: see fork.
        self.first_fits = {node.index: {} for node in self.nodes}

    def fork(self, now: float, placement: PlacementPolicy) -> WorkPool:
        """A cycle's working pool over this one: node records are copied only when the cycle changes them
        (take, reservation blocks, preemption what-ifs), the bucket indexes are copied whole (dict copies)."""
        pool = WorkPool.__new__(WorkPool)
        pool.now = now
        pool.nodes = list(self.nodes)
        pool.by_name = dict(self.by_name)
        # A pool built afresh lists each bucket's nodes in node order; the base's buckets are in the order
        # nodes moved there, so sort them (best fit breaks ties by that order).
        pool.buckets = {part: [dict.fromkeys(sorted(b)) for b in buckets] for part, buckets in self.buckets.items()}
        pool.members = {part: list(group) for part, group in self.members.items()}
        pool.rooms = {part: [dict.fromkeys(sorted(r)) if r else {} for r in rooms]
                      for part, rooms in self.rooms.items()}
        pool.node_rooms = dict(self.node_rooms)
        pool._owned = set()
        pool._member_pos = self._member_pos  # read only: which nodes are members never changes in a cycle
        # The index is copied, the per-node entries are the base's: what the cycle's sweeps learn of a node
        # it has not copied (`own` drops the copy's entry) holds for the base too, so the next cycle's first
        # sweep walks the releases only of nodes that changed since (starts, ends, late jobs).
        pool.first_fits = dict(self.first_fits)
        pool.changed = []
        self._move_late(pool, now)
        pool.attach(placement)
        return pool

    def _move_late(self, pool: WorkPool, now: float) -> None:
        # Releases are kept at raw expected ends; a job already past its own is due "soon" (release_time).
        ends = self._ends
        while ends and ends[0][0] < now + 1.0:
            end, job_id = heapq.heappop(ends)
            if self._held.get(job_id, (None,))[0] == end:
                self._late[job_id] = end
        for job_id in self._late:
            end, slices = self._held[job_id]
            for piece in slices:
                node = pool.own(pool.by_name[piece.node])
                node.releases = [(max(t, now + 1.0), g, c, m, j) if j == job_id else (t, g, c, m, j)
                                 for t, g, c, m, j in node.releases]

    def forget_fits(self, index: int) -> None:
        """The node changed: new, empty entries for the next forks to fill (a fork's copy of the index still
        holds the old ones only for its own cycle, which is over: the engine changes the base between cycles)."""
        self.first_fits[index] = {}

    def hold(self, job_id: int, slices: tuple[NodeSlice, ...], end: float) -> None:
        """A job started (or was found running): its slices are taken until `end`."""
        self._held[job_id] = (end, slices)
        heapq.heappush(self._ends, (end, job_id))
        for piece in slices:
            if piece.node in self.by_name:
                self.occupy(piece, job_id, end)

    def note_running(self, job_id: int, slices: tuple[NodeSlice, ...], end: float) -> None:
        """Built from views that already count the job: record only its release."""
        self._held[job_id] = (end, slices)
        heapq.heappush(self._ends, (end, job_id))
        for piece in slices:
            node = self.by_name.get(piece.node)
            if node is not None:
                node.releases.append((end, len(piece.gpus) if piece.gpu_milli == GPU_MILLI else 0, piece.cpus,
                                      piece.mem_mib, job_id))
                self.forget_fits(node.index)

    def unhold(self, job_id: int) -> None:
        """A job's resources came back."""
        held = self._held.pop(job_id, None)
        self._late.pop(job_id, None)
        if held is not None:
            for piece in held[1]:
                if piece.node in self.by_name:
                    self.release(piece, job_id)

    def retime(self, job_id: int, end: float) -> None:
        """A running job's expected end moved (it is being stopped)."""
        held = self._held.get(job_id)
        if held is None or held[0] == end:
            return
        self._late.pop(job_id, None)
        self._held[job_id] = (end, held[1])
        heapq.heappush(self._ends, (end, job_id))
        for piece in held[1]:
            node = self.by_name.get(piece.node)
            if node is not None:
                node.releases = [(end, g, c, m, j) if j == job_id else (t, g, c, m, j)
                                 for t, g, c, m, j in node.releases]
                self.forget_fits(node.index)
