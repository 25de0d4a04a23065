"""Reasons a pending job is kept from the scheduler altogether: a begin time, dependencies and QOS
wall-time limits."""
from __future__ import annotations

from collections.abc import Callable, Mapping

from corral.core.model import Reason
from corral.engine.dependencies import Status, clause_status, combine, parse_dependency
from corral.engine.records import Job, JobState
from corral.engine.tenancy import Tenancy

# A job id's state and whether it ever started ((None, False): no such job).
JobStateOf = Callable[[int], tuple[JobState | None, bool]]


def gate(job: Job, now: float, tenancy: Tenancy, jobs: Mapping[int, Job], state_of: JobStateOf
         ) -> tuple[Reason, str] | None:
    """None if the job may be scheduled; else (reason, detail)."""
    if job.spec.begin_time is not None and now < job.spec.begin_time:
        return Reason.BEGIN_TIME, f"eligible from {job.spec.begin_time:.0f} (epoch seconds)"
    if job.eligible_at is not None and now < job.eligible_at:
        return Reason.BEGIN_TIME, f"preempted {job.restart_count} times: requeue backoff until {job.eligible_at:.0f}"
    qos = tenancy.qos_of(job.spec)
    if qos.max_wall_s is not None and job.spec.request.time_limit_s > qos.max_wall_s:
        return (Reason.QOS_MAX_WALL,
                f"time limit {job.spec.request.time_limit_s}s over qos {qos.name} max {qos.max_wall_s}s")
    if job.spec.dependency:
        status = dependency_status(job, jobs, state_of)
        if status is Status.WAITING:
            return Reason.DEPENDENCY, job.spec.dependency
        if status is Status.NEVER:
            return Reason.DEPENDENCY_NEVER, job.spec.dependency
    return None


def dependency_status(job: Job, jobs: Mapping[int, Job], state_of: JobStateOf) -> Status:
    dep = parse_dependency(job.spec.dependency)
    statuses = []
    for clause in dep.clauses:
        if clause.kind == "singleton":
            statuses.append(_singleton(job, jobs))
            continue
        states, started = [], []
        for target_id, _ in clause.targets:
            state, has_started = state_of(target_id)
            states.append(state)
            started.append(has_started)
        statuses.append(clause_status(clause.kind, states, started))
    return combine(statuses, dep.any_of)


def _singleton(job: Job, jobs: Mapping[int, Job]) -> Status:
    for other in jobs.values():
        if other.id == job.id or other.spec.name != job.spec.name or other.spec.user != job.spec.user:
            continue
        if other.state is not JobState.PENDING or other.id < job.id:
            return Status.WAITING
    return Status.SATISFIED
