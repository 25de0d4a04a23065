"""One scheduling cycle: priority order, gang placement, EASY-style backfill with reservations.

    plan = schedule(snapshot, config)

Jobs are taken in priority order (higher first, then earlier submission, then lower id). Each job either
starts now on a whole gang of nodes, or waits with a reason. The first `config.max_reservations` jobs that
cannot start get a reservation at the earliest time the timeline allows; every later job may start now
only where it does not eat into any reservation (backfill). Free resources only shrink and reservations
only grow during a cycle, so once a shape has failed with some time limit, the same shape with an equal or
longer limit fails too: that memo keeps a cycle over 100,000 pending jobs cheap.
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from corral.hostlist import sort_key
from corral.core.model import (
    CyclePlan,
    PendingJob,
    Reason,
    SchedulerConfig,
    Snapshot,
    Start,
    Waiting,
)
from corral.core.placement import Need, Pool
from corral.core.timeline import earliest_gang_start


def priority_key(job: PendingJob) -> tuple[int, float, int]:
    return job.order


@dataclass(slots=True)
class _Memo:
    # shape -> the shortest time limit that already failed to start now
    failed_limit: dict[tuple, float]
    # shape -> static reason (partition problems, can never fit), or None when the shape is placeable
    static: dict[tuple, Reason | None]
    # shape -> (version, fits the free resources ignoring reservations?); valid while version holds
    fits_free: dict[tuple, tuple[int, bool]]
    # bumped on every start: the free resources changed
    version: int = 0


def schedule(snapshot: Snapshot, config: SchedulerConfig = SchedulerConfig()) -> CyclePlan:
    cycle = _Cycle(snapshot, config)
    ordered = sorted(snapshot.pending, key=attrgetter("order"))
    limit = config.max_jobs_considered
    for position, job in enumerate(ordered):
        if job.held:
            cycle.waiting.append(Waiting(job.id, Reason.HELD))
        elif limit is not None and position >= limit:
            cycle.waiting.append(Waiting(job.id, Reason.PRIORITY))
        else:
            cycle.consider(job)
    stats = {"pending": len(ordered), "started": len(cycle.starts), "reservations": cycle.reservations}
    return CyclePlan(starts=tuple(cycle.starts), waiting=tuple(cycle.waiting), stats=stats)


class _Cycle:
    def __init__(self, snapshot: Snapshot, config: SchedulerConfig) -> None:
        self.now = snapshot.now
        self.pool = Pool(snapshot.nodes, snapshot.now)
        self.partitions = {p.name: p for p in snapshot.partitions}
        self.max_reservations = config.max_reservations
        _load_running(self.pool, snapshot)
        self.memo = _Memo(failed_limit={}, static={}, fits_free={})
        self.starts: list[Start] = []
        self.waiting: list[Waiting] = []
        self.reservations = 0

    def consider(self, job: PendingJob) -> None:
        req = job.request
        shape = req.shape
        memo = self.memo
        failed = memo.failed_limit.get(shape)
        if failed is not None and req.time_limit_s >= failed and self.reservations >= self.max_reservations:
            # The common case deep in a long queue: known not to fit, and no reservation left to give.
            self.waiting.append(Waiting(job.id, self._blocked_reason(shape, req)))
            return
        static = memo.static.get(shape, False)
        if static is False:
            static = memo.static[shape] = _static_reason(self.pool, self.partitions, req)
        if static is None and req.time_limit_s > (self.partitions[req.partition].max_time_s or req.time_limit_s):
            static = Reason.PARTITION_TIME_LIMIT
        if static is not None:
            self.waiting.append(Waiting(job.id, static))
            return
        need = Need(req.gpus_per_node, req.cpus_per_node, req.mem_per_node_mib)
        if failed is None or req.time_limit_s < failed:
            end = self.now + req.time_limit_s
            nodes = self.pool.find_now(req.partition, need, req.num_nodes, end)
            if nodes is not None:
                # Ranks follow Slurm's node order, the order of the job's hostlist.
                nodes.sort(key=lambda n: sort_key(n.name))
                self.starts.append(Start(job.id, tuple(self.pool.take(n, need, end) for n in nodes)))
                memo.version += 1
                return
            memo.failed_limit[shape] = req.time_limit_s
        if self.reservations < self.max_reservations:
            self.waiting.append(self._reserve(job.id, req, need))
        else:
            self.waiting.append(Waiting(job.id, self._blocked_reason(shape, req)))

    def _reserve(self, job_id: int, req, need: Need) -> Waiting:
        candidates = self.pool.members.get(req.partition, [])
        found = earliest_gang_start(candidates, need, req.num_nodes, req.time_limit_s, self.now)
        if found is None:
            return Waiting(job_id, Reason.REQ_NODE_NOT_AVAIL)
        start, nodes = found
        for node in nodes:
            node.blocks.append((start, start + req.time_limit_s, need.gpus, need.cpus, need.mem_mib))
        self.reservations += 1
        return Waiting(job_id, Reason.RESOURCES, start, tuple(n.name for n in nodes))

    def _blocked_reason(self, shape: tuple, req) -> Reason:
        """Resources when the free capacity cannot hold the job at all; Priority when it could, but
        only by eating into a higher-priority job's reservation."""
        memo = self.memo
        cached = memo.fits_free.get(shape)
        if cached is None or (cached[0] != memo.version and cached[1]):
            # A shape that did not fit never fits again this cycle (free capacity only shrinks).
            need = Need(req.gpus_per_node, req.cpus_per_node, req.mem_per_node_mib)
            fits = sum(1 for node in self.pool.members.get(req.partition, ()) if node.fits_now(need))
            cached = memo.fits_free[shape] = (memo.version, fits >= req.num_nodes)
        return Reason.PRIORITY if cached[1] else Reason.RESOURCES


def _load_running(pool: Pool, snapshot: Snapshot) -> None:
    for job in snapshot.running:
        when = pool.release_time(job.expected_end)
        for s in job.slices:
            node = pool.by_name.get(s.node)
            if node is not None:
                node.releases.append((when, len(s.gpus), s.cpus, s.mem_mib))


def _static_reason(pool: Pool, partitions: dict, req) -> Reason | None:
    """Reasons that no amount of waiting for running jobs fixes."""
    part = partitions.get(req.partition)
    if part is None:
        return Reason.INVALID_PARTITION
    if not part.up:
        return Reason.PARTITION_DOWN
    need = Need(req.gpus_per_node, req.cpus_per_node, req.mem_per_node_mib)
    all_nodes = [n for n in pool.nodes if req.partition in n.partitions and n.capacity_fits(need)]
    if len(all_nodes) < req.num_nodes:
        return Reason.PARTITION_NODE_LIMIT
    usable = [n for n in pool.members.get(req.partition, ()) if n.capacity_fits(need)]
    if len(usable) < req.num_nodes:
        return Reason.REQ_NODE_NOT_AVAIL
    return None
