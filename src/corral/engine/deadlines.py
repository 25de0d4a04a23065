"""When running and completing jobs next need the engine (time limit, warning signal, kill escalation,
becoming preemptible), and when waiting jobs become eligible (sbatch --begin, a requeue backoff), kept as
lazy heaps so that neither a cycle nor next_deadline walks every job.

An entry is pushed whenever a job's running view is (re)built, which every change of those times goes
through (start, restore, stop, scontrol update, tenancy change), and when a kill is re-sent. Entries are
never updated in place: one that no longer matches its job is dropped when it reaches the top.
"""
from __future__ import annotations

import heapq
from collections.abc import Mapping

from corral.core.model import RunningJob
from corral.engine.records import Job, JobState


def eligible_times(job: Job) -> tuple[float, ...]:
    """The times a waiting job becomes eligible to start at."""
    return tuple(t for t in (job.spec.begin_time, job.eligible_at) if t is not None)


def warn_at(job: Job) -> float | None:
    """When a running job gets its warning signal (sbatch --signal), unless it has had it this run."""
    if not job.spec.warn_signal or job.warned:
        return None
    return job.run_start + job.spec.request.time_limit_s - job.spec.warn_before_s


def job_times(job: Job) -> tuple[float, ...]:
    """The times `job` needs the engine at (past ones included: they are due)."""
    if job.state is JobState.RUNNING:
        limit_at = job.run_start + job.spec.request.time_limit_s
        warn = warn_at(job)
        return (limit_at,) if warn is None else (limit_at, warn)
    if job.state is JobState.COMPLETING and job.kill_deadline is not None:
        return (job.kill_deadline,)
    return ()


class Deadlines:
    def __init__(self) -> None:
        self._due: list[tuple[float, int]] = []
        self._preemptible: list[tuple[float, int]] = []
        self._eligible: list[tuple[float, int]] = []

    def push_eligible(self, job: Job) -> None:
        """Call whenever a waiting job gets a begin time or a requeue backoff."""
        for t in eligible_times(job):
            heapq.heappush(self._eligible, (t, job.id))

    def next_eligible(self, jobs: Mapping[int, Job], pending: Mapping[int, object], now: float | None) -> float | None:
        """The earliest time (after `now`, if given) at which a waiting job becomes eligible."""
        heap = self._eligible
        while heap:
            t, job_id = heap[0]
            job = jobs.get(job_id)
            if (now is None or t > now) and job is not None and job_id in pending \
                    and t in eligible_times(job):
                return t
            heapq.heappop(heap)
        return None

    def push(self, job: Job, view: RunningJob | None) -> None:
        """Call whenever a running job's view is rebuilt (with that view), or its kill is re-sent."""
        for t in job_times(job):
            heapq.heappush(self._due, (t, job.id))
        if view is not None and view.preemptible_from is not None and not view.completing:
            heapq.heappush(self._preemptible, (view.preemptible_from, job.id))

    def due(self, jobs: Mapping[int, Job], running: Mapping[int, RunningJob], now: float) -> list[Job]:
        """Active jobs with a time at or before `now`, in job id order (as a walk over all of them)."""
        heap, ids = self._due, set()
        while heap and heap[0][0] <= now:
            _, job_id = heapq.heappop(heap)
            ids.add(job_id)
        return [jobs[i] for i in sorted(ids) if i in running]

    def earliest(self, jobs: Mapping[int, Job], running: Mapping[int, RunningJob]) -> float | None:
        heap = self._due
        while heap:
            t, job_id = heap[0]
            job = jobs.get(job_id)
            if job is not None and job_id in running and t in job_times(job):
                return t
            heapq.heappop(heap)
        return None

    def next_preemptible(self, running: Mapping[int, RunningJob], now: float) -> float | None:
        """The earliest time after `now` at which a running job becomes preemptible."""
        heap = self._preemptible
        while heap:
            t, job_id = heap[0]
            view = running.get(job_id)
            if t > now and view is not None and view.preemptible_from == t and not view.completing:
                return t
            heapq.heappop(heap)
        return None
