"""Choosing victims: which running jobs, stopped whole, let a blocked job start now.

Candidates are jobs the preemptor may displace: in a cohort, jobs of queues that borrow while the
preemptor's queue is within its nominal quota (reclaim); anywhere, jobs whose QOS the preemptor's QOS
preempts (priority), except that a preemptor whose queue would borrow takes nothing by priority from a
cohort queue that is not borrowing (else reclaim and priority would undo each other in a loop). Jobs
inside their minimum runtime, or already stopping, are never candidates.
Removal is simulated on the cycle's pool and quota book (and undone): candidates are removed in order
(reclaim first, then lowest priority, then most recently started) until the preemptor fits, then each
victim that turns out unnecessary is put back. If removing every candidate would not make room, nobody
is preempted. Victims are always whole jobs, so no gang is ever preempted in part.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from corral.core.model import PendingJob, RunningJob
from corral.core.pool import WorkPool
from corral.core.quota import QuotaBook
from corral.core.worknode import Need, WorkNode

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Victim:
    job: RunningJob
    cause: str  # "reclaim" | "priority"


def candidates(job: PendingJob, amounts: dict[str, float], running: list[RunningJob], book: QuotaBook,
               now: float, taken: set[int], budgets: Mapping[str, int] | None = None) -> list[Victim]:
    reclaim = bool(job.queue) and book.within_nominal(job.queue, amounts)
    found: list[Victim] = []
    for victim in running:
        if victim.completing or victim.id in taken:
            continue
        if budgets and not job.ignores_budgets and budgets.get(victim.budget_group, 1) <= 0:
            continue  # its group (a service at its min_ready) may lose no more
        if victim.preemptible_from is None or victim.preemptible_from > now:
            continue
        if reclaim and victim.queue != job.queue and book.same_cohort(victim.queue, job.queue) \
                and victim.queue in book.borrowing_at_start:
            found.append(Victim(victim, "reclaim"))
        elif victim.qos in job.preempts_qos and (reclaim or not _guarded(job, victim, book)):
            found.append(Victim(victim, "priority"))
    found.sort(key=lambda v: (v.cause != "reclaim", v.job.priority, -v.job.start_time, v.job.id))
    return found


def _guarded(job: PendingJob, victim: RunningJob, book: QuotaBook) -> bool:
    """A job whose queue would borrow may not preempt, even by QOS, the jobs of another queue of its
    cohort that is within its nominal quota: that queue would reclaim its quota at once, and the two would
    preempt each other for ever (Kueue never lets a borrower displace a lender's nominal share)."""
    return victim.queue != job.queue and book.same_cohort(victim.queue, job.queue) \
        and victim.queue not in book.borrowing_at_start


class WhatIf:
    """Remove running jobs from the pool and quota book, and put them back."""

    def __init__(self, pool: WorkPool, book: QuotaBook) -> None:
        self.pool, self.book = pool, book

    def remove(self, job: RunningJob) -> None:
        for piece in job.slices:
            if piece.node in self.pool.by_name:
                self.pool.release(piece, job.id)
        self.book.charge(job.queue, job.resources, -1)

    def restore(self, job: RunningJob) -> None:
        for piece in job.slices:
            if piece.node in self.pool.by_name:
                self.pool.occupy(piece, job.id, job.expected_end)
        self.book.charge(job.queue, job.resources, +1)


def choose_victims(options: list[Victim], what_if: WhatIf, fits: Callable[[], bool],
                   budgets: Mapping[str, int] | None = None) -> list[Victim] | None:
    """A set of victims whose removal makes `fits()` true, or None. Leaves the pool as it found it. With
    `budgets`, no more of a group is taken than its budget allows."""
    chosen: list[Victim] = []
    spent: dict[str, int] = {}
    for victim in options:
        if victim.cause == "reclaim" and not what_if.book.borrowing(victim.job.queue):
            continue  # reclaim takes back what a queue borrowed, never its own nominal quota
        group = victim.job.budget_group
        if budgets and group in budgets:
            if spent.get(group, 0) >= budgets[group]:
                continue
            spent[group] = spent.get(group, 0) + 1
        what_if.remove(victim.job)
        chosen.append(victim)
        if fits():
            break
    else:
        for victim in chosen:
            what_if.restore(victim.job)
        return None
    # Put back every victim that is not needed after all, latest first.
    for victim in reversed(chosen[:-1]):
        what_if.restore(victim.job)
        if fits():
            chosen.remove(victim)
        else:
            what_if.remove(victim.job)
    for victim in chosen:
        what_if.restore(victim.job)
    return chosen


def once_completing_jobs_end(running: list[RunningJob], what_if: WhatIf, place: Callable[[], T | None]) -> T | None:
    """Where the job would go (what `place` finds) once the jobs already being stopped are gone, or None.
    Found: it waits for them (no new victims) and holds the place. Leaves the pool as it found it."""
    stopping = [job for job in running if job.completing]
    if not stopping:
        return None
    for job in stopping:
        what_if.remove(job)
    answer = place()
    for job in stopping:
        what_if.restore(job)
    return answer


def hold_for_stopping(pool: WorkPool, running: list[RunningJob], nodes: list[WorkNode], need: Need,
                      duration_s: float) -> None:
    """A claimant (PendingJob.claim) that waits for jobs being stopped (its victims) holds the place it takes
    once they are gone, `nodes`: a reservation block of its need on each, from when the stopping jobs there
    are gone (now, where they are gone already) until its own end. Without it, a lower job (a victim
    requeued as soon as it stopped) starts on what one victim freed while another still stops, and the
    preemptor takes it back next cycle, for ever (a gang against service replicas). The hold lasts one
    cycle; the claim puts the preemptor first in every cycle until it starts, so it holds again as long as
    anything it waits for is stopping, and no longer."""
    stopping = {job.id for job in running if job.completing}
    held = [pool.own(pool.by_name[found.name]) for found in nodes]
    starts = [max((t for t, *_, job_id in node.releases if job_id in stopping), default=pool.now) for node in held]
    # The gang starts when its last node is free, and runs its time limit from then.
    until = max(starts) + duration_s
    for node, start in zip(held, starts, strict=True):
        pool.block(node, max(start, pool.now), until, need.gpus, need.cpus, need.mem_mib)
