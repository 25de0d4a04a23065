"""One scheduling cycle: limits, quota, gang placement, preemption, EASY-style backfill with reservations.

    plan = schedule(snapshot, config)

Jobs are taken in priority order (higher first, then earlier submission, then lower id). For each job:
its counted limits (per-user/account jobs and GPUs, array throttles) and its queue's quota are checked;
then its whole gang must fit now, on nodes where it eats into no reservation of a job ahead of it and no
advance reservation it may not use. A job that does not fit may preempt (reclaiming lent quota, or by
QOS); otherwise the first `config.max_reservations` such jobs get a reservation at the earliest time the
timeline allows, and every later job may start only where it delays none of them (backfill).

Free resources only shrink and reservations only grow during a cycle, so once a shape has failed with
some time limit, the same shape with an equal or longer limit fails too: that memo keeps a cycle over
100,000 pending jobs cheap.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from operator import attrgetter

from corral.core.config import SchedulerConfig
from corral.core.cycle import Cycle
from corral.core.model import CyclePlan, PendingJob, Reason
from corral.core.snapshot import Snapshot


def schedule(snapshot: Snapshot, config: SchedulerConfig = SchedulerConfig()) -> CyclePlan:
    ordered = in_order(snapshot.pending)
    limit = config.max_jobs_considered
    window = ordered if limit is None else ordered[:limit]
    if all(job.held for job in window):
        # Nothing can start or preempt: the cycle's working state (O(nodes + running)) is not built.
        return CyclePlan(waiting_ids=tuple(job.id for job in ordered), waiting_records=tuple(_idle_reasons(ordered)),
                         stats={"pending": len(ordered), "started": 0, "reservations": 0, "preempted": 0})
    cycle = Cycle(_in_play(snapshot, window), config)
    cycle.consider_all(window)
    if limit is not None:
        cycle.waiting_ids.extend(job.id for job in ordered[limit:])
        cycle.waiting_records.extend(_idle_reasons(ordered[limit:]))
    stats = {"pending": len(ordered), "started": len(cycle.starts), "reservations": cycle.reservations,
             "preempted": len(cycle.preemptions)}
    return CyclePlan(starts=tuple(cycle.starts), waiting_ids=tuple(cycle.waiting_ids),
                     waiting_records=tuple(cycle.waiting_records),
                     preemptions=tuple(cycle.preemptions), stats=stats)


def _idle_reasons(jobs: list[PendingJob]) -> Iterator[Reason]:
    """Why jobs that the cycle does not consider wait: held, or behind the considered ones."""
    return (Reason.HELD if job.held else Reason.PRIORITY for job in jobs)


_partition_of = attrgetter("request.partition")
_order_key = attrgetter("order_key")


def in_order(jobs: Iterable[PendingJob]) -> list[PendingJob]:
    """The jobs as `sorted(jobs, key=attrgetter("order"))` has them, sorted by `PendingJob.order_key`, the
    same order as one int per job: 100,000 jobs in about 28 ms, where three stable passes over the order's
    fields took about 60 and one sort of the order tuples about 100 (each key read is a cache miss of its
    own, and tuples that tie on their first fields take several comparisons each)."""
    return sorted(jobs, key=_order_key)


def _in_play(snapshot: Snapshot, window: list[PendingJob]) -> Snapshot:
    """The snapshot with only the nodes of partitions some considered job (in `window`, not held) asks
    for. Nothing else can change a decision: placement, the backfill timeline and static reasons look
    only at the job's own partition, and preemption frees room only there (quota is charged from every
    running job still).
    With isolated partitions this keeps a cycle's working state to the partitions that have work."""
    if snapshot.base is not None:
        return snapshot  # a fork of the engine's base pool costs nothing per node anyway
    wanted = set(map(_partition_of, (job for job in window if not job.held)))
    if all(wanted.issuperset(node.partitions) for node in snapshot.nodes):
        return snapshot
    nodes = tuple(node for node in snapshot.nodes if not wanted.isdisjoint(node.partitions))
    return replace(snapshot, nodes=nodes)


