"""The service reconciler: a service's desired replicas against the replicas (jobs) that exist, as a plan.
Pure: the engine calls `reconcile` after anything that touches a service and carries the plan out through
the same submission and kill paths as users' jobs (engine/service_events.py).

What it decides: a missing replica index is submitted; a replica beyond the wanted count is stopped; during
a rolling update (a new revision) each index gets a replica of the new revision next to its old one
(at most `update.max_surge` at a time; with no surge, at most `update.max_unavailable` old ones are stopped
first), and the old one is stopped once the new one is ready; when the new replicas are not all ready
within `update.ready_timeout_s`, the update is rolled back. Restarts of a replica that exited are not
the reconciler's: the replica is the same job, requeued by the after-run decision with its backoff.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from corral.engine.records import Job, JobState, Service


@dataclass(frozen=True, slots=True)
class ReplicaStart:
    index: int
    revision: int


@dataclass(frozen=True, slots=True)
class ReplicaStop:
    job_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class ServicePlan:
    submit: tuple[ReplicaStart, ...] = ()
    stop: tuple[ReplicaStop, ...] = ()
    rollback: bool = False  # the update's new replicas were not ready in time: go back to the old spec
    update_done: bool = False  # every replica is of the current revision: the update is over
    next_at: float | None = None  # when to look again with nothing else happening
    notes: tuple[str, ...] = field(default=())


def present(job: Job) -> bool:
    """A replica that is, or will be again: waiting, running, or being stopped to come back (preempted, its
    node failed, its liveness probe failed: after_run restarts every replica that is not cancelled). One
    being stopped for good (cancelled: scaled down, replaced, deleted) is not."""
    if job.state in (JobState.PENDING, JobState.RUNNING):
        return True
    return job.state is JobState.COMPLETING and job.final_state is not JobState.CANCELLED


def reconcile(service: Service, replicas: Iterable[Job], now: float) -> ServicePlan:
    live = [job for job in replicas if present(job)]
    if service.deleted:
        return ServicePlan(stop=tuple(ReplicaStop(j.id, "service deleted") for j in live))
    by_index: dict[int, list[Job]] = {}
    for job in live:
        by_index.setdefault(job.spec.replica, []).append(job)
    wanted = service.desired_replicas
    stops = [ReplicaStop(j.id, f"scaled down to {wanted}") for i, jobs in by_index.items() if i >= wanted
             for j in jobs]
    if service.update_started is not None and _overdue(service, live, now):
        return ServicePlan(stop=tuple(stops), rollback=True)
    submits: list[ReplicaStart] = []
    update = service.spec.update
    surging = sum(1 for i in range(wanted) if _surging(service, by_index.get(i, [])))
    unavailable = sum(1 for i in range(wanted) if not any(j.ready for j in by_index.get(i, [])))
    for index in range(wanted):
        jobs = by_index.get(index, [])
        current = [j for j in jobs if j.spec.service_revision == service.revision]
        old = [j for j in jobs if j.spec.service_revision != service.revision]
        stops += [ReplicaStop(j.id, f"replica {index} has another replica") for j in current[1:]]
        if not jobs:
            submits.append(ReplicaStart(index, service.revision))
        elif old and any(j.ready for j in current):
            stops += [ReplicaStop(j.id, f"replaced by revision {service.revision}") for j in old]
        elif old and not current:
            if surging < update.max_surge:
                surging += 1
                submits.append(ReplicaStart(index, service.revision))
            elif update.max_surge == 0 and unavailable < update.max_unavailable:
                unavailable += 1
                stops += [ReplicaStop(j.id, f"updating to revision {service.revision}") for j in old]
    done = service.update_started is not None and not stops and not submits and all(
        j.spec.service_revision == service.revision for j in live)
    waiting = [j.submit_time + update.ready_timeout_s for j in live
               if j.spec.service_revision == service.revision and not j.ready]
    next_at = min(waiting) if service.update_started is not None and waiting else None
    return ServicePlan(submit=tuple(submits), stop=tuple(stops), update_done=done, next_at=next_at)


def _surging(service: Service, jobs: list[Job]) -> bool:
    """An index that has an old replica and a not yet ready new one."""
    revisions = {j.spec.service_revision for j in jobs}
    return len(revisions) > 1 and not any(j.ready for j in jobs if j.spec.service_revision == service.revision)


def _overdue(service: Service, live: list[Job], now: float) -> bool:
    """A replica of the new revision that is still not ready `update.ready_timeout_s` after it was submitted."""
    timeout = service.spec.update.ready_timeout_s
    return any(j.spec.service_revision == service.revision and not j.ready and now >= j.submit_time + timeout
               for j in live)


def crash_loop_line(index: int, why: str, delay_s: float) -> str:
    """The history line of a restart: "replica 3 restarted: liveness probe failed 3 times: HTTP 500 (in 20 s)"."""
    return f"replica {index} restarted: {why} (in {delay_s:g} s)"


def autoscaled(service: Service, now: float) -> int | None:
    """The replicas the autoscaler wants from the gateway's last report, or None (no autoscale, no report).
    desired = clamp(ceil(inflight / target_inflight) or ceil(rps / target_rps), min, max); with
    scale_to_zero, 0 once no request came for idle_s."""
    scale, load = service.spec.autoscale, service.load
    if scale is None or load is None:
        return None
    inflight, rps, _at = load
    if scale.target_inflight is not None:
        want = -(-inflight // scale.target_inflight)
    elif scale.target_rps is not None:
        want = -(-rps // scale.target_rps)
    else:
        return None
    idle = inflight == 0 and rps == 0 and now - service.last_busy >= scale.idle_s
    low = 0 if scale.scale_to_zero and idle else scale.min_replicas
    return int(max(low, min(scale.max_replicas, want)))


def stabilised(service: Service, want: int, now: float) -> tuple[int, tuple[float, int] | None]:
    """The count to apply for what the autoscaler wants now, and the window's new state (Service.lower_since),
    as Kubernetes' HPA: up at once; down only once fewer were wanted for autoscale.scale_down_window_s, and
    then to the most wanted over that window, so a pause between bursts does not stop replicas. Scaling to
    zero is not held again: it already waited idle_s without a request."""
    current = service.desired_replicas
    if want >= current:
        return want, None
    scale = service.spec.autoscale
    window = scale.scale_down_window_s if scale is not None else 0.0
    if want == 0 and scale is not None and scale.scale_to_zero:
        return 0, None
    since, most = service.lower_since if service.lower_since is not None else (now, want)
    most = max(most, want)
    if now - since >= window:
        return most, None
    return current, (since, most)
