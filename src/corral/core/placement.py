"""Where a gang fits: per-node working state for one cycle, node choice (best fit or FGD), device choice.

`Pool` is the cycle's mutable working copy of the cluster (built from the immutable snapshot, thrown away
after the cycle). Nodes sit in buckets by free GPU count per partition, so best fit (the fewest free GPUs
that still fit) is a short walk up the buckets instead of a sort per job.

Fractional GPUs: a request may ask for a share of one GPU per node (`Need.gpu_milli` < 1000). A shared
device leaves `free` (whole-GPU requests never see it) and its milli-GPU in use are kept in
`WorkNode.shared` until its last sharer leaves. Best fit puts a fraction on the shared device with the least
room that still holds it (nodes indexed by room), else on a whole free device of the fullest node. The
backfill timeline counts only whole devices: a shared device is not expected back (conservative).

With `placement="fgd"` or `"fgd+cpu"` nodes are also grouped by their fragmentation state (see fgd.py); a
request scores each group once and takes a node of the best group that fits.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from corral.core.fgd import Fit, FragScorer, StateKey, model_matches
from corral.core.model import GPU_MILLI, Gpu, NodeSlice, NodeView, Reason


@dataclass(slots=True)
class Need:
    """What a gang needs on each of its nodes, and for how long."""

    gpus: int
    cpus: int
    mem_mib: int
    gpu_milli: int = GPU_MILLI  # < 1000: a share of one device (gpus == 1)


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
    # Devices shared by fractional jobs: index -> milli-GPU in use (1..1000); never also in `free`.
    shared: dict[int, int] = field(default_factory=dict)
    schedulable: bool = True

    def capacity_fits(self, need: Need) -> bool:
        return len(self.gpus) >= need.gpus and self.cpus >= need.cpus and self.mem_mib >= need.mem_mib

    def fits_now(self, need: Need) -> bool:
        if need.gpu_milli < GPU_MILLI:
            return (bool(self.free) or self.share_room(need.gpu_milli) is not None) and \
                self.free_cpus >= need.cpus and self.free_mem_mib >= need.mem_mib
        return self.fits_whole_free(need)

    def fits_whole_free(self, need: Need) -> bool:
        """Does `need` fit now on whole free devices (how the backfill timeline counts)?"""
        return len(self.free) >= need.gpus and self.free_cpus >= need.cpus and self.free_mem_mib >= need.mem_mib

    def share_room(self, milli: int) -> int | None:
        """The least room (free milli) among shared devices that can take `milli` more; None if none."""
        best = None
        for used in self.shared.values():
            room = GPU_MILLI - used
            if room >= milli and (best is None or room < best):
                best = room
        return best

    def free_milli(self) -> tuple[int, ...]:
        """Free milli-GPU per device, high to low (the fragmentation state)."""
        shared = sorted((GPU_MILLI - u for u in self.shared.values()), reverse=True)
        idle = len(self.gpus) - len(self.free) - len(shared)
        return (GPU_MILLI,) * len(self.free) + tuple(shared) + (0,) * idle

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
        if not self.blocks:
            return True
        # Reservations count whole devices only: a fraction on an already shared device takes none.
        gpus = need.gpus
        if need.gpu_milli < GPU_MILLI and self.share_room(need.gpu_milli) is not None:
            gpus = 0
        for b_start, b_end, *_ in self.blocks:
            if b_end <= start or b_start >= end:
                continue
            g, c, m = self.available_at(max(b_start, start))
            if g < gpus or c < need.cpus or m < need.mem_mib:
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

    def __init__(self, nodes: tuple[NodeView, ...], now: float, scorer: FragScorer | None = None) -> None:
        self.now = now
        self.nodes: list[WorkNode] = []
        self.by_name: dict[str, WorkNode] = {}
        # partition -> buckets[free gpu count] -> insertion-ordered set of schedulable node indices
        self.buckets: dict[str, list[dict[int, None]]] = {}
        self.members: dict[str, list[WorkNode]] = {}
        # partition -> room (free milli of a shared device, 1..999) -> schedulable nodes with such a device
        self.rooms: dict[str, list[dict[int, None]]] = {}
        self.node_rooms: dict[int, frozenset[int]] = {}
        # FGD only: partition -> fragmentation state (interned id) -> schedulable nodes in that state
        self.scorer = scorer
        self.groups: dict[str, dict[int, dict[int, None]]] = {}
        self.node_key: dict[int, int] = {}
        # Copy-on-write (see fork): indices of the nodes this pool may change; None: all of them (a pool
        # built from views owns its nodes).
        self._owned: set[int] | None = None
        self._member_pos: dict[str, dict[int, int]] = {}  # partition -> node index -> place in members
        # Base pools (kept by the engine): job id -> (raw expected end, slices), and the ends that a fork
        # must move to now + 1 (jobs past their expected end).
        self._held: dict[int, tuple[float, tuple[NodeSlice, ...]]] = {}
        self._ends: list[tuple[float, int]] = []
        self._late: dict[int, float] = {}
        # Static reasons per request shape: they depend only on what a rebuild would change.
        self.static_memo: dict[tuple[object, ...], Reason | None] = {}
        # Built once per cycle for every node: kept to plain loops (this is the cycle's fixed cost).
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
            if scorer is not None and view.schedulable:
                self._regroup(node)

    # ----- copy-on-write forks of a base pool the engine keeps between cycles

    def fork(self, now: float) -> Pool:
        """A cycle's working pool over this one: node records are copied only when the cycle changes them
        (take, reservation blocks, preemption what-ifs), the bucket indexes are copied whole (dict copies)."""
        if self.scorer is not None:
            raise ValueError("FGD pools are rebuilt each cycle")
        pool = Pool.__new__(Pool)
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
        pool.scorer, pool.groups, pool.node_key = None, {}, {}
        pool._owned = set()
        pool._member_pos = self._member_pos
        pool._held, pool._ends, pool._late = {}, [], {}
        pool.static_memo = self.static_memo
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
        return pool

    def own(self, node: WorkNode) -> WorkNode:
        """The record of `node` this pool may change (a fork copies it on first use)."""
        owned = self._owned
        if owned is None:
            return node
        index = node.index
        if index in owned:
            return self.nodes[index]
        node = self.nodes[index]
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

    def hold(self, job_id: int, slices: tuple[NodeSlice, ...], end: float) -> None:
        """Base pool: a job started (or was found running): its slices are taken until `end`."""
        self._held[job_id] = (end, slices)
        heapq.heappush(self._ends, (end, job_id))
        for piece in slices:
            if piece.node in self.by_name:
                self.occupy(piece, job_id, end)

    def note_running(self, job_id: int, slices: tuple[NodeSlice, ...], end: float) -> None:
        """Base pool built from views that already count the job: record only its release."""
        self._held[job_id] = (end, slices)
        heapq.heappush(self._ends, (end, job_id))
        for piece in slices:
            node = self.by_name.get(piece.node)
            if node is not None:
                node.releases.append((end, len(piece.gpus) if piece.gpu_milli == GPU_MILLI else 0, piece.cpus,
                                      piece.mem_mib, job_id))

    def unhold(self, job_id: int) -> None:
        """Base pool: a job's resources came back."""
        held = self._held.pop(job_id, None)
        self._late.pop(job_id, None)
        if held is not None:
            for piece in held[1]:
                if piece.node in self.by_name:
                    self.release(piece, job_id)

    def retime(self, job_id: int, end: float) -> None:
        """Base pool: a running job's expected end moved (it is being stopped)."""
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
        """The `count` best nodes where `need` fits from now until `end`, or None: best fit, or the least
        fragmentation with FGD. A job in an advance reservation (name, nodes) is confined to the
        reservation's nodes; `model` ("A" or "A|B") confines it to nodes with that GPU model."""
        if self.scorer is not None:
            return self._find_scored(partition, need, count, end, reservation, model)
        buckets = self.buckets.get(partition)
        if not buckets:
            return None
        name, allowed = reservation if reservation else ("", None)
        chosen: list[WorkNode] = []
        first = need.gpus
        if need.gpu_milli < GPU_MILLI:
            chosen = self._shared_fits(partition, need, count, end, name, allowed, model)
            if len(chosen) == count:
                return chosen
        for free_gpus in range(first, len(buckets)):
            for index in buckets[free_gpus]:
                node = self.nodes[index]
                if allowed is not None and node.name not in allowed:
                    continue
                if model and node.gpu_model != model and not model_matches(node.gpu_model, model):
                    continue
                if node.fits_window(need, self.now, end, name) and node not in chosen:
                    chosen.append(node)
                    if len(chosen) == count:
                        return chosen
        return None

    def _shared_fits(self, partition: str, need: Need, count: int, end: float, name: str,
                     allowed: frozenset[str] | None, model: str) -> list[WorkNode]:
        """Best fit for a fraction: nodes with a shared device that holds it, the tightest room first."""
        rooms = self.rooms.get(partition)
        chosen: list[WorkNode] = []
        if not rooms:
            return chosen
        for room in range(need.gpu_milli, GPU_MILLI):
            for index in rooms[room]:
                node = self.nodes[index]
                if allowed is not None and node.name not in allowed:
                    continue
                if model and not model_matches(node.gpu_model, model):
                    continue
                if node.fits_window(need, self.now, end, name) and node not in chosen:
                    chosen.append(node)
                    if len(chosen) == count:
                        return chosen
        return chosen

    def _find_scored(self, partition: str, need: Need, count: int, end: float,
                     reservation: tuple[str, frozenset[str]] | None, model: str) -> list[WorkNode] | None:
        """FGD: score each fragmentation state once, then take nodes of the best states that fit."""
        groups = self.groups.get(partition)
        if not groups:
            return None
        name, allowed = reservation if reservation else ("", None)
        scorer = self.scorer
        assert scorer is not None  # find_now asks this only of a pool with a scorer
        gpus, milli, cpus = need.gpus, need.gpu_milli, need.cpus
        table = scorer.table(gpus, milli, cpus)
        keys = scorer.keys
        scored = []
        lookup = table.get  # a state never scored for this task gives the sentinel
        for state, members in groups.items():
            score = lookup(state, _UNSCORED)
            if score is _UNSCORED:
                score = scorer.best(state, gpus, milli, cpus)
            if score is not None and (not model or model_matches(keys[state][0], model)):
                scored.append((score, state, members))
        if not scored:
            return None
        chosen: list[WorkNode] = []
        order = _score_order(keys)
        if count == 1:
            top = min(scored, key=order)
            node = self._first_fitting(top[2], need, end, name, allowed)
            if node is not None:
                return [node]
        scored.sort(key=order)
        for _, _, members in scored:
            for index in members:
                node = self.nodes[index]
                if (allowed is None or node.name in allowed) and node.fits_window(need, self.now, end, name):
                    chosen.append(node)
                    if len(chosen) == count:
                        return chosen
        return None

    def _first_fitting(self, members: dict[int, None], need: Need, end: float, name: str,
                       allowed: frozenset[str] | None) -> WorkNode | None:
        for index in members:
            node = self.nodes[index]
            if (allowed is None or node.name in allowed) and node.fits_window(need, self.now, end, name):
                return node
        return None

    def take(self, node: WorkNode, need: Need, end: float, job_id: int) -> NodeSlice:
        gpus: tuple[int, ...]
        if need.gpu_milli < GPU_MILLI:
            gpus = (self._share_device(node, need),)
        else:
            gpus = choose_devices(node, need.gpus)
        piece = NodeSlice(node.name, gpus, need.cpus, need.mem_mib, need.gpu_milli)
        self.occupy(piece, job_id, end)
        return piece

    def _share_device(self, node: WorkNode, need: Need) -> int:
        """The device a fraction goes to: with FGD the one its score chose, else the tightest shared
        device that holds it, else a whole free one (from the tightest topology domain)."""
        room = node.share_room(need.gpu_milli)
        if self.scorer is not None and not node.blocks:
            state = self.scorer.intern(_state_key(node))
            score = self.scorer.best(state, 1, need.gpu_milli, need.cpus)
            if score is not None:
                room = score[3] if score[3] < GPU_MILLI else None
        if room is None:
            return choose_devices(node, 1)[0]
        return min(i for i, used in node.shared.items() if GPU_MILLI - used == room)

    def occupy(self, piece: NodeSlice, job_id: int, end: float) -> None:
        node = self.own(self.by_name[piece.node])
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

    def _rebucket(self, node: WorkNode, before: int, shares: bool = False) -> None:
        if node.schedulable:
            if shares or node.index in self.node_rooms:
                self._index_rooms(node)
            if self.scorer is not None:
                self._regroup(node)
        after = len(node.free)
        if after == before:
            return
        for part in node.partitions:
            buckets = self.buckets.get(part)
            if buckets is not None and node.index in buckets[before]:
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

    def _regroup(self, node: WorkNode) -> None:
        """Move a schedulable node to the group of its current fragmentation state (FGD only)."""
        assert self.scorer is not None  # only FGD pools have groups
        key = self.scorer.intern(_state_key(node))
        old = self.node_key.get(node.index)
        if old == key:
            return
        self.node_key[node.index] = key
        for part in node.partitions:
            groups = self.groups.setdefault(part, {})
            if old is not None:
                members = groups[old]
                del members[node.index]
                if not members:
                    del groups[old]
            groups.setdefault(key, {})[node.index] = None


_UNSCORED: Fit = (0.0, -1, -1, -1)  # a sentinel, told by identity: no score is this object


def _state_key(node: WorkNode) -> StateKey:
    return (node.gpu_model, node.free_milli(), node.free_cpus)


def _score_order(keys: list[StateKey]) -> Callable[[tuple[Fit, int, dict[int, None]]], tuple[Fit, StateKey]]:
    """Best score first; ties by the state itself (not its id, which depends on what was scored before)."""
    def order(item: tuple[Fit, int, dict[int, None]]) -> tuple[Fit, StateKey]:
        return item[0], keys[item[1]]
    return order
