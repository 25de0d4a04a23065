"""The working state and per-job decisions of one scheduling cycle (see scheduler.py for the order)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from itertools import islice
from operator import attrgetter
from typing import Literal

from corral import gpu_models
from corral.core import preemption
from corral.core.config import SchedulerConfig
from corral.core.fgd import model_matches
from corral.core.model import (
    GPU_MILLI,
    DeepKey,
    Partition,
    PendingJob,
    Preempt,
    Reason,
    Request,
    RunningJob,
    Start,
    Waiting,
)
from corral.core.pool import WorkPool
from corral.core.quota import QuotaBook, job_resources
from corral.core.snapshot import Snapshot
from corral.core.timeline import Openings, earliest_gang_start
from corral.core.worknode import Need, WorkNode
from corral.hostlist import sort_key

# An enum member's lookup is a descriptor call: these run per waiting job.
_PRIORITY, _RESOURCES, _HELD = Reason.PRIORITY, Reason.RESOURCES, Reason.HELD
_caps = attrgetter("caps")


@dataclass(slots=True)
class _Memo:
    # (shape, reservation) -> the shortest time limit that already failed to start now
    failed_limit: dict[tuple[object, ...], float] = field(default_factory=dict)
    # shape -> (version, fits the free resources ignoring reservations?); valid while version holds
    fits_free: dict[tuple[object, ...], tuple[int, bool]] = field(default_factory=dict)
    # (shape, queue, qos) -> preemption found no victims
    no_victims: set[tuple[object, ...]] = field(default_factory=set)
    # (queue, shape) -> (version, quota shortfall or None)
    quota: dict[tuple[object, ...], tuple[int, str | None]] = field(default_factory=dict)
    # bumped on every start: the free resources changed
    version: int = 0
    # The entries of failed_limit and fits_free for plain jobs (no reservation, no confinement, the model
    # their request names), keyed by shape alone: what Cycle.consider_all reads per job deep in the queue.
    plain_failed: dict[tuple[object, ...], float] = field(default_factory=dict)
    plain_fits: dict[tuple[object, ...], tuple[int, bool]] = field(default_factory=dict)


class Cycle:
    def __init__(self, snapshot: Snapshot, config: SchedulerConfig) -> None:
        self.now = snapshot.now
        self.config = config
        base = snapshot.base
        # Static reasons per (shape, model): a base keeps them across cycles (see core/basepool.py).
        self.static_memo: dict[tuple[object, ...], Reason | None]
        if base is not None:
            self.pool = base.fork(snapshot.now, config.placement_policy)
            self.static_memo = base.static_reasons.memo(snapshot.partitions)
        else:
            self.pool = WorkPool(snapshot.nodes, snapshot.now, config.placement_policy)
            self.static_memo = {}
        self.partitions = {p.name: p for p in snapshot.partitions}
        self.running = list(snapshot.running)
        self.book = QuotaBook(snapshot.queues, snapshot.running)
        self.used: dict[str, int] = {}
        self.advance = {r.name: r for r in snapshot.reservations}
        # Counted limits matter only to jobs that carry caps.
        self._count_caps = any(map(_caps, snapshot.pending))
        _load_running(self, releases=base is None)
        self.memo = _Memo()
        self.openings = Openings(self.pool.changed if self.pool.changed is not None else [])
        self.starts: list[Start] = []
        # Why each job that does not start waits (CyclePlan.waiting_ids and waiting_records).
        self.waiting_ids: list[int] = []
        self.waiting_records: list[Reason | Waiting] = []
        self.preemptions: list[Preempt] = []
        self.preempted: set[int] = set()
        self.budgets = dict(snapshot.disruption_budgets)  # spent as victims are taken
        # Per group with a max_per_node: how many of its running jobs each node holds (built when first asked).
        self.group_nodes: dict[str, dict[str, int]] = {}
        # (shape, model, chosen nodes) -> whether enough of the chosen nodes could ever hold the job.
        self.chosen_memo: dict[tuple[object, ...], bool] = {}
        self.reservations = 0
        self.preemption_attempts = 0
        self.blocked_partitions: set[str] = set()

    def consider_all(self, ordered: list[PendingJob]) -> None:
        """Consider each job in priority order (held ones only wait). Deep in a long queue, once every
        reservation is given, most jobs are plain and of a shape that already failed with no longer a time
        limit: `_place` would only say why they wait. That answer is taken by `_consider_deep` from the same
        memos, without the calls and keys of the general path (the cycle's cost over 100,000 pending jobs).
        Reservations are only ever added, so once they are all given the rest of the queue is deep."""
        deep_from = len(ordered)
        fast = self.config.backfill
        max_reservations = self.config.max_reservations
        for index, job in enumerate(ordered):
            if fast and self.reservations >= max_reservations:
                deep_from = index
                break
            if job.held:
                self._note(job.id, _HELD)
            else:
                self.consider(job)
        if deep_from < len(ordered):
            self._consider_deep(islice(ordered, deep_from, None))

    def _consider_deep(self, jobs: Iterable[PendingJob]) -> None:
        """Jobs after every reservation is given (with backfill), in order; their lookups bound once, as
        this loop runs once per pending job. A plain job's answer depends only on its deep key (shape and
        time limit): once that key is known to fail with Resources (the shape failed with no longer a limit,
        and the free resources cannot hold it at all, which free resources that only shrink never undo),
        the answer is kept per key for the rest of the cycle and every later job of the key gets it in one
        lookup (keys are hashed by identity, and shared, so this touches little memory per job)."""
        add_id, add_record = self.waiting_ids.append, self.waiting_records.append
        memo = self.memo
        failed_limit, fits = memo.plain_failed.get, memo.plain_fits.get
        settled: dict[DeepKey, Reason] = {}
        settled_reason = settled.get
        for job in jobs:
            deep = job.deep
            if deep is not None:
                reason = settled_reason(deep)
                if reason is not None:
                    add_id(job.id)
                    add_record(reason)
                    continue
                shape = deep.shape
                failed = failed_limit(shape)
                if failed is not None and deep.time_limit_s >= failed:
                    cached = fits(shape)
                    if cached is not None and (not cached[1] or cached[0] == memo.version):
                        reason = _PRIORITY if cached[1] else _RESOURCES
                    else:
                        reason = self._blocked_reason(job.request, job.request.gpu_model)
                    if reason is _RESOURCES:
                        settled[deep] = reason
                    add_id(job.id)
                    add_record(reason)
                    continue
            if job.held:
                add_id(job.id)
                add_record(_HELD)
            else:
                self.consider(job)

    def consider(self, job: PendingJob) -> None:
        req = job.request
        if not self.config.backfill and req.partition in self.blocked_partitions:
            self._note(job.id, _PRIORITY)
            return
        if job.caps and not self._within_caps(job):
            return
        amounts = None
        if job.queue:
            flavors = self.book.flavors.get(job.queue)
            if flavors:
                self._consider_flavors(job, flavors)
                return
            amounts = _amounts(req, req.gpu_model)
            short = self._quota_shortfall(job.queue, req.shape, amounts)
            if short is not None:
                if not self._try_preempt(job, amounts, req.gpu_model):
                    self._wait(job, Reason.QUEUE_QUOTA, detail=short)
                return
        self._place(job, req.gpu_model, amounts)

    def _consider_flavors(self, job: PendingJob, flavors: list[str]) -> None:
        """Kueue's flavor assignment: the first GPU model (in the queue's order) with quota and room;
        if none has room now, the first with quota waits (preempting or reserving) on that model."""
        req = job.request
        # (flavor, the model constraint the job runs under with that flavor's quota)
        options = [(f, m) for f in flavors if (m := _within_flavor(f, req.gpu_model)) is not None]
        if not options:
            self._wait(job, Reason.QUEUE_QUOTA, detail=f"queue {job.queue}: no quota for GPU model {req.gpu_model}")
            return
        with_quota: list[tuple[str, dict[str, float]]] = []
        shortfalls: list[str] = []
        need = Need(req.gpus_per_node, req.cpus_per_node, req.mem_per_node_mib, req.gpu_milli)
        for flavor, model in options:
            amounts = _amounts(req, flavor)
            short = self._quota_shortfall(job.queue, (req.shape, flavor), amounts)
            if short is not None:
                shortfalls.append(short)
                continue
            if self._static(job, model) is None and self._start_now(job, need, amounts, model):
                return
            with_quota.append((model, amounts))
        if with_quota:
            self._place(job, *with_quota[0])
            return
        for flavor, model in options:
            if self._try_preempt(job, _amounts(req, flavor), model):
                return
        self._wait(job, Reason.QUEUE_QUOTA, detail="; ".join(shortfalls))

    def _place(self, job: PendingJob, model: str, amounts: dict[str, float] | None) -> None:
        """Start the job now on nodes of `model` ("" = any), or preempt for it, or reserve, or say why not."""
        req = job.request
        key = (req.shape, job.reservation, model, self._confinement(job))
        failed = self.memo.failed_limit.get(key)
        if failed is not None and req.time_limit_s >= failed and self.reservations >= self.config.max_reservations \
                and not job.preempts_qos and not job.queue:
            # The common case deep in a long queue: known not to fit, no reservation left to give.
            self._note(job.id, self._blocked_reason(req, model))
            return
        static = self._static(job, model)
        if static is not None:
            self._wait(job, static)
            return
        need = Need(req.gpus_per_node, req.cpus_per_node, req.mem_per_node_mib, req.gpu_milli)
        amounts = amounts or _amounts(req, model)
        if failed is None or req.time_limit_s < failed:
            if self._start_now(job, need, amounts, model):
                return
            self.memo.failed_limit[key] = req.time_limit_s
            if not job.reservation and key[3] is _NO_NODES and model == req.gpu_model:
                self.memo.plain_failed[req.shape] = req.time_limit_s
        if self._try_preempt(job, amounts, model):
            return
        if not self.config.backfill:
            self.blocked_partitions.add(req.partition)
            self._wait(job, Reason.RESOURCES)
            return
        if self.reservations < self.config.max_reservations:
            self._note(job.id, self._reserve(job, need, model))
        else:
            self._wait(job, self._blocked_reason(req, model))

    def _quota_shortfall(self, queue: str, shape: tuple[object, ...], amounts: dict[str, float]) -> str | None:
        # Quota usage changes only when a job starts (memo.version), so deep in a long queue the answer
        # for a (queue, shape) pair is reused.
        key = (queue, shape)
        cached = self.memo.quota.get(key)
        if cached is not None and cached[0] == self.memo.version:
            return cached[1]
        short = self.book.shortfall(queue, amounts)
        self.memo.quota[key] = (self.memo.version, short)
        return short

    def _within_caps(self, job: PendingJob) -> bool:
        for cap in job.caps:
            used = self.used.get(cap.key, 0)
            if used + cap.amount > cap.limit:
                self._wait(job, cap.reason, detail=f"{cap.key}: {used} of {cap.limit} in use")
                return False
        return True

    # ----- outcomes

    def _wait(self, job: PendingJob, reason: Reason, detail: str = "") -> None:
        self._note(job.id, Waiting(job.id, reason, detail=detail) if detail else reason)

    def _note(self, job_id: int, record: Reason | Waiting) -> None:
        self.waiting_ids.append(job_id)
        self.waiting_records.append(record)

    def _start_now(self, job: PendingJob, need: Need, amounts: dict[str, float], model: str) -> bool:
        req = job.request
        end = self.now + req.time_limit_s
        advance = self._advance_of(job)
        if job.exclusive:
            found = self._find_whole_nodes(job, end, advance, model)
            if found is None:
                return False
            nodes, need = found
            # It holds the nodes whole: its queue's quota must hold them whole too.
            amounts = _whole_amounts(amounts, len(nodes), need)
            if self.book.shortfall(job.queue, amounts) is not None:
                return False
        else:
            chosen = self.pool.find_now(req.partition, need, req.num_nodes, end, advance, model)
            if chosen is None:
                return False
            nodes = chosen
        # Ranks follow Slurm's node order, the order of the job's hostlist (a sort computes every key, even
        # of one node: most starts).
        if len(nodes) > 1:
            nodes.sort(key=lambda n: sort_key(n.name))
        self.starts.append(Start(job.id, tuple(self.pool.take(n, need, end, job.id) for n in nodes)))
        if self._per_node_limit(job):
            counts = self._group_counts(job.group)
            for node in nodes:
                counts[node.name] = counts.get(node.name, 0) + 1
        self.book.charge(job.queue, amounts)
        for cap in job.caps:
            self.used[cap.key] = self.used.get(cap.key, 0) + cap.amount
        self.memo.version += 1
        return True

    def _try_preempt(self, job: PendingJob, amounts: dict[str, float], model: str) -> bool:
        """Preempt what makes room for `job` now; True if it is waiting on victims (new or stopping)."""
        if not job.preempts_qos and not job.queue:
            return False
        req = job.request
        memo_key = (req.shape, job.queue, job.qos, job.preempts_qos, model, job.ignores_budgets,
                    self._confinement(job))
        if memo_key in self.memo.no_victims or self.preemption_attempts >= self.config.max_preemption_attempts:
            return False
        if self._static(job, model) is not None:
            return False
        self.preemption_attempts += 1
        need = Need(req.gpus_per_node, req.cpus_per_node, req.mem_per_node_mib, req.gpu_milli)
        end = self.now + req.time_limit_s

        def place() -> list[WorkNode] | None:
            if self.book.shortfall(job.queue, amounts) is not None:
                return None
            return self.pool.find_now(req.partition, need, req.num_nodes, end, self._advance_of(job), model)

        def fits() -> bool:
            return place() is not None

        what_if = preemption.WhatIf(self.pool, self.book)
        awaited = preemption.once_completing_jobs_end(self.running, what_if, place)
        if awaited is not None:
            if job.claim:
                preemption.hold_for_stopping(self.pool, self.running, awaited, need, req.time_limit_s)
            self._wait(job, Reason.RESOURCES, detail="waiting for preempted or ending jobs to exit")
            return True
        budgets = None if job.ignores_budgets else self.budgets
        options = preemption.candidates(job, amounts, self.running, self.book, self.now, self.preempted, budgets)
        victims = preemption.choose_victims(options, what_if, fits, budgets) if options else None
        if not victims:
            self.memo.no_victims.add(memo_key)
            return False
        for victim in victims:
            self.preempted.add(victim.job.id)
            if victim.job.budget_group in self.budgets:
                self.budgets[victim.job.budget_group] -= 1
            self.preemptions.append(Preempt(victim.job.id, job.id, victim.cause))
        self.running = [r for r in self.running if r.id not in self.preempted] + [
            _stopping(v.job) for v in victims]
        ids = ", ".join(str(v.job.id) for v in victims)
        self._wait(job, Reason.RESOURCES, detail=f"preempting job(s) {ids}")
        return True

    def _reserve(self, job: PendingJob, need: Need, model: str) -> Waiting:
        req = job.request
        advance = self._advance_of(job, idle_only=False)
        members = candidates = self.pool.members.get(req.partition, [])
        if advance is not None and advance[1] is not None:
            allowed = advance[1]
            candidates = [n for n in candidates if n.name in allowed]
        if model:
            candidates = [n for n in candidates if model_matches(n.gpu_model, model)]
        if job.exclusive:
            found, need = _earliest_whole_nodes(candidates, need, req.num_nodes, req.time_limit_s, self.now,
                                                job.reservation)
        else:
            # A partition's members are one list for the whole cycle: its sweeps keep their openings.
            kept = (self.openings, req.partition) if candidates is members else None
            found = earliest_gang_start(candidates, need, req.num_nodes, req.time_limit_s, self.now,
                                        job.reservation, self.pool.first_fits, kept)
        if found is None:
            reason = Reason.RESERVATION if job.reservation and advance is not None and advance[1] is not None \
                else Reason.REQ_NODE_NOT_AVAIL
            return Waiting(job.id, reason)
        start, nodes = found
        for node in nodes:
            self.pool.block(node, start, start + req.time_limit_s, need.gpus, need.cpus, need.mem_mib)
        self.reservations += 1
        return Waiting(job.id, Reason.RESOURCES, start, tuple(n.name for n in nodes))

    # ----- reasons

    def _static(self, job: PendingJob, model: str) -> Reason | None:
        req = job.request
        key = (req.shape, model)
        static: Reason | Literal[False] | None = self.static_memo.get(key, False)
        if static is False:
            static = self.static_memo[key] = _static_reason(self.pool, self.partitions, req, model)
        if static is None and req.time_limit_s > (self.partitions[req.partition].max_time_s or req.time_limit_s):
            return Reason.PARTITION_TIME_LIMIT
        if static is None and job.nodes is not None and not self._enough_chosen(job, model):
            return Reason.REQ_NODE_NOT_AVAIL
        if static is None and job.reservation:
            resv = self.advance.get(job.reservation)
            if resv is None or resv.holder is None and resv.end < self.now + req.time_limit_s:
                return Reason.RESERVATION
        return static

    def _advance_of(self, job: PendingJob, idle_only: bool = True) -> tuple[str, frozenset[str] | None] | None:
        """The reservation the job may use, and the nodes it is confined to (None: any node): within the
        nodes it chose (-w, -x, --constraint), less the nodes that hold max_per_node of its group already,
        and for an exclusive job (unless planning ahead: not `idle_only`) only idle nodes."""
        advance = self._reservation_of(job)
        limited = self._per_node_limit(job) > 0
        if not limited and job.nodes is None and not job.exclusive:
            return advance
        name, allowed = advance if advance is not None else ("", None)
        if allowed is None:
            allowed = job.nodes if job.nodes is not None else \
                frozenset(n.name for n in self.pool.members.get(job.request.partition, ()))
        elif job.nodes is not None:
            allowed = allowed & job.nodes
        if limited:
            allowed = allowed - self._crowded(job)
        if job.exclusive and idle_only:
            by_name = self.pool.by_name
            allowed = frozenset(n for n in allowed if n in by_name and _idle(by_name[n]))
        return (name, allowed)

    def _confinement(self, job: PendingJob) -> object:
        """What besides its shape confines where a job may go, for the memo keys."""
        limited = self._per_node_limit(job) > 0
        if not limited and job.nodes is None and not job.exclusive:
            return _NO_NODES
        return (self._crowded(job) if limited else _NO_NODES, job.nodes, job.exclusive)

    def _enough_chosen(self, job: PendingJob, model: str) -> bool:
        """Do the nodes the job chose hold enough of its partition's usable nodes that could ever fit it?"""
        req = job.request
        key = (req.shape, model, job.nodes)
        enough = self.chosen_memo.get(key)
        if enough is None:
            assert job.nodes is not None
            need = Need(req.gpus_per_node, req.cpus_per_node, req.mem_per_node_mib, req.gpu_milli)
            usable = [n for n in self.pool.members.get(req.partition, ()) if n.name in job.nodes
                      and n.capacity_fits(need) and model_matches(n.gpu_model, model)]
            enough = self.chosen_memo[key] = len(usable) >= req.num_nodes
        return enough

    def _find_whole_nodes(self, job: PendingJob, end: float, advance: tuple[str, frozenset[str] | None] | None,
                          model: str) -> tuple[list[WorkNode], Need] | None:
        """Idle nodes for an exclusive job, all of one size (the job takes each node whole), and that size."""
        req = job.request
        assert advance is not None  # an exclusive job is always confined
        name, allowed = advance
        assert allowed is not None
        need = Need(req.gpus_per_node, req.cpus_per_node, req.mem_per_node_mib, req.gpu_milli)
        for size, names in _by_size(self.pool.by_name[n] for n in allowed if n in self.pool.by_name).items():
            whole = Need(*size)
            if not whole.capacity_covers(need) or len(names) < req.num_nodes:
                continue
            nodes = self.pool.find_now(req.partition, whole, req.num_nodes, end, (name, frozenset(names)), model)
            if nodes is not None:
                return nodes, whole
        return None

    def _group_counts(self, group: str) -> dict[str, int]:
        counts = self.group_nodes.get(group)
        if counts is None:
            counts = self.group_nodes[group] = {}
            for running in self.running:
                if running.budget_group == group and not running.completing:
                    for piece in running.slices:
                        counts[piece.node] = counts.get(piece.node, 0) + 1
        return counts

    def _per_node_limit(self, job: PendingJob) -> int:
        """How many of its group one node may hold (0: no limit): max_per_node, and with spread
        ceil(spread_replicas / the partition's nodes that can take work now). Spread counts live nodes at
        placement, not at submission: a replica whose node was lost then fits beside its siblings on a live
        node instead of waiting for the lost one (a node down or drained is in no partition's members)."""
        limit = job.max_per_node
        if job.spread_replicas:
            live = max(1, len(self.pool.members.get(job.request.partition, ())))
            even = -(-job.spread_replicas // live)
            limit = min(limit, even) if limit else even
        return limit

    def _crowded(self, job: PendingJob) -> frozenset[str]:
        """The nodes the job (with a per-node limit) may not use for its group's anti-affinity."""
        limit = self._per_node_limit(job)
        return frozenset(n for n, c in self._group_counts(job.group).items() if c >= limit)

    def _reservation_of(self, job: PendingJob) -> tuple[str, frozenset[str] | None] | None:
        if not job.reservation:
            return None
        resv = self.advance[job.reservation]
        if resv.holder is not None:
            return (resv.name, None)  # a hold: its holder may use its nodes and any other
        if resv.start > self.now:
            return (resv.name, frozenset())  # not open yet: nowhere to start now
        return (resv.name, resv.nodes)

    def _blocked_reason(self, req: Request, model: str) -> Reason:
        """Resources when the free capacity cannot hold the job at all; Priority when it could, but
        only by eating into a higher-priority job's reservation."""
        memo = self.memo
        key = (req.shape, model)
        cached = memo.fits_free.get(key)
        if cached is None or (cached[0] != memo.version and cached[1]):
            # A shape that did not fit never fits again this cycle (free capacity only shrinks).
            need = Need(req.gpus_per_node, req.cpus_per_node, req.mem_per_node_mib, req.gpu_milli)
            cached = memo.fits_free[key] = (memo.version, self._fits_free(req, need, model))
            if model == req.gpu_model:
                memo.plain_fits[req.shape] = cached
        return Reason.PRIORITY if cached[1] else Reason.RESOURCES

    def _fits_free(self, req: Request, need: Need, model: str) -> bool:
        """Do `req.num_nodes` of its partition's nodes hold `need` now, reservations aside? Whole GPUs are
        looked for only among the nodes with enough free (the pool's buckets by free GPU count: at 90 %
        busy a few of 10,000), and the count stops once it is reached."""
        pool, wanted, found = self.pool, req.num_nodes, 0
        if wanted <= 0:
            return True
        if need.gpu_milli < GPU_MILLI:
            candidates: Iterable[WorkNode] = pool.members.get(req.partition, ())
        else:
            buckets = pool.buckets.get(req.partition, [])
            nodes = pool.nodes
            candidates = (nodes[index] for bucket in islice(buckets, need.gpus, None) for index in bucket)
        for node in candidates:
            if node.fits_now(need) and model_matches(node.gpu_model, model):
                found += 1
                if found >= wanted:
                    return True
        return False


_NO_NODES: frozenset[str] = frozenset()


def _idle(node: WorkNode) -> bool:
    """Nothing runs on the node: an exclusive job may take it."""
    return (len(node.free) == len(node.gpus) and not node.shared and node.free_cpus == node.cpus
            and node.free_mem_mib == node.mem_mib)


def _whole_amounts(amounts: dict[str, float], count: int, whole: Need) -> dict[str, float]:
    """An exclusive job's quota amounts: `count` whole nodes of size `whole`, in the keys it is charged under."""
    held = {"cpu": float(whole.cpus * count), "mem_mib": float(whole.mem_mib * count)}
    return {key: held.get(key, float(whole.gpus * count)) for key in amounts}


def _by_size(nodes: Iterable[WorkNode]) -> dict[tuple[int, int, int], list[str]]:
    """Node names by whole-node size (GPUs, CPUs, memory): an exclusive gang takes nodes of one size."""
    sizes: dict[tuple[int, int, int], list[str]] = {}
    for node in nodes:
        sizes.setdefault((len(node.gpus), node.cpus, node.mem_mib), []).append(node.name)
    return sizes


def _earliest_whole_nodes(candidates: list[WorkNode], need: Need, count: int, duration_s: float, now: float,
                          reservation: str) -> tuple[tuple[float, list[WorkNode]] | None, Need]:
    """The earliest time `count` candidates of one size are wholly free for `duration_s` (an exclusive
    job's backfill reservation), and the whole-node need it then holds."""
    best: tuple[float, list[WorkNode]] | None = None
    best_need = need
    by_name = {n.name: n for n in candidates}
    for size, names in _by_size(candidates).items():
        whole = Need(*size)
        if not whole.capacity_covers(need) or len(names) < count:
            continue
        found = earliest_gang_start([by_name[n] for n in names], whole, count, duration_s, now, reservation)
        if found is not None and (best is None or found[0] < best[0]):
            best, best_need = found, whole
    return best, best_need
_flavor_memo: dict[tuple[str, str], str | None] = {}


def _within_flavor(flavor: str, constraint: str) -> str | None:
    """gpu_models.within_flavor, memoized: it is asked for every flavor of every waiting job in every cycle."""
    pair = (flavor, constraint)
    if pair not in _flavor_memo:
        if len(_flavor_memo) >= 65536:
            _flavor_memo.clear()
        _flavor_memo[pair] = gpu_models.within_flavor(flavor, constraint)
    return _flavor_memo[pair]


def _amounts(req: Request, model: str = "") -> dict[str, float]:
    return job_resources(req.gpu_amount, req.num_nodes * req.cpus_per_node, req.num_nodes * req.mem_per_node_mib,
                         model)


def _stopping(job: RunningJob) -> RunningJob:
    return replace(job, completing=True)


def _load_running(cycle: Cycle, releases: bool = True) -> None:
    """Running jobs' counted limits, and (unless the pool is a fork of a base that has them) the times
    their resources come back; advance reservations onto their nodes."""
    pool = cycle.pool
    used = cycle.used
    for job in cycle.running if releases or cycle._count_caps else ():
        if releases:
            when = pool.release_time(job.expected_end)
            for s in job.slices:
                node = pool.by_name.get(s.node)
                if node is not None:
                    # A shared device is not planned on coming back (see placement.py).
                    node.releases.append((when, len(s.gpus) if s.gpu_milli == 1000 else 0, s.cpus, s.mem_mib,
                                          job.id))
        for key, amount in job.charges:
            used[key] = used.get(key, 0) + amount
    for resv in cycle.advance.values():
        for name in resv.nodes:
            node = pool.by_name.get(name)
            if node is not None and resv.end > cycle.now:
                pool.own(node).advance.append((resv.start, resv.end, resv.name, resv.maintenance))


def _static_reason(pool: WorkPool, partitions: dict[str, Partition], req: Request, model: str) -> Reason | None:
    """Reasons that no amount of waiting for running jobs fixes."""
    part = partitions.get(req.partition)
    if part is None:
        return Reason.INVALID_PARTITION
    if not part.up:
        return Reason.PARTITION_DOWN
    need = Need(req.gpus_per_node, req.cpus_per_node, req.mem_per_node_mib, req.gpu_milli)
    all_nodes = [n for n in pool.nodes if req.partition in n.partitions and n.capacity_fits(need)
                 and model_matches(n.gpu_model, model)]
    if len(all_nodes) < req.num_nodes:
        return Reason.PARTITION_NODE_LIMIT
    usable = [n for n in pool.members.get(req.partition, ()) if n.capacity_fits(need)
              and model_matches(n.gpu_model, model)]
    if len(usable) < req.num_nodes:
        return Reason.REQ_NODE_NOT_AVAIL
    return None
