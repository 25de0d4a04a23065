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

from operator import attrgetter

from corral.core.cycle import Cycle
from corral.core.model import CyclePlan, Reason, SchedulerConfig, Snapshot, Waiting


def schedule(snapshot: Snapshot, config: SchedulerConfig = SchedulerConfig()) -> CyclePlan:
    cycle = Cycle(snapshot, config)
    ordered = sorted(snapshot.pending, key=attrgetter("order"))
    limit = config.max_jobs_considered
    for position, job in enumerate(ordered):
        if job.held:
            cycle.waiting.append(Waiting(job.id, Reason.HELD))
        elif limit is not None and position >= limit:
            cycle.waiting.append(Waiting(job.id, Reason.PRIORITY))
        else:
            cycle.consider(job)
    stats = {"pending": len(ordered), "started": len(cycle.starts), "reservations": cycle.reservations,
             "preempted": len(cycle.preemptions)}
    return CyclePlan(starts=tuple(cycle.starts), waiting=tuple(cycle.waiting),
                     preemptions=tuple(cycle.preemptions), stats=stats)


