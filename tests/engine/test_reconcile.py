"""engine/services.py: reconcile(service, replicas, now) as a table of cases."""
from __future__ import annotations

import dataclasses

import pytest

from corral.api.services import ServiceSpec
from corral.engine.records import Job, JobState, Service
from corral.engine.services import ReplicaStart, ReplicaStop, autoscaled, reconcile
from tests.engine.builders import spec

SPEC = ServiceSpec(name="web", command=["serve"], replicas=3, workdir="/srv")


def service(revision: int = 1, wanted: int = 3, updating: bool = False, deleted: bool = False, **update) -> Service:
    spec_ = SPEC.model_copy(update={"update": SPEC.update.model_copy(update=update)}) if update else SPEC
    return Service(spec=spec_, revision=revision, desired_replicas=wanted, created=0.0, deleted=deleted,
                   update_started=0.0 if updating else None, previous_revision=revision - 1 if updating else 0)


def replica(job_id: int, index: int, revision: int = 1, state: JobState = JobState.RUNNING, ready: bool = True,
            final: JobState | None = None, submitted: float = 0.0) -> Job:
    job_spec = dataclasses.replace(spec(), service="web", service_revision=revision, replica=index)
    return Job(id=job_id, spec=job_spec, submit_time=submitted, state=state, ready=ready, final_state=final)


def starts(*indexes: int, revision: int = 1) -> tuple[ReplicaStart, ...]:
    return tuple(ReplicaStart(i, revision) for i in indexes)


CASES = {
    "new service: every index": (service(), [], starts(0, 1, 2), ()),
    "all there": (service(), [replica(1, 0), replica(2, 1), replica(3, 2)], (), ()),
    "a pending replica counts": (service(), [replica(1, 0, state=JobState.PENDING), replica(2, 1), replica(3, 2)],
                                 (), ()),
    "a preempted one coming back counts": (
        service(), [replica(1, 0, state=JobState.COMPLETING, final=JobState.PENDING), replica(2, 1), replica(3, 2)],
        (), ()),
    "one being cancelled is replaced": (
        service(), [replica(1, 0, state=JobState.COMPLETING, final=JobState.CANCELLED), replica(2, 1), replica(3, 2)],
        starts(0), ()),
    "scaled down": (service(wanted=1), [replica(1, 0), replica(2, 1), replica(3, 2)], (),
                    (ReplicaStop(2, "scaled down to 1"), ReplicaStop(3, "scaled down to 1"))),
    "two of one index": (service(wanted=1), [replica(1, 0), replica(2, 0)], (),
                         (ReplicaStop(2, "replica 0 has another replica"),)),
    "deleted": (service(deleted=True), [replica(1, 0), replica(2, 1)], (),
                (ReplicaStop(1, "service deleted"), ReplicaStop(2, "service deleted"))),
    "update: surge one": (service(revision=2, updating=True), [replica(1, 0), replica(2, 1), replica(3, 2)],
                          starts(0, revision=2), ()),
    "update: wait while the new one is not ready": (
        service(revision=2, updating=True), [replica(1, 0), replica(4, 0, 2, ready=False), replica(2, 1),
                                             replica(3, 2)], (), ()),
    "update: new ready, drain the old and surge the next": (
        service(revision=2, updating=True), [replica(1, 0), replica(4, 0, 2), replica(2, 1), replica(3, 2)],
        starts(1, revision=2), (ReplicaStop(1, "replaced by revision 2"),)),
    "update: surge two": (service(revision=2, updating=True, max_surge=2),
                          [replica(1, 0), replica(2, 1), replica(3, 2)], starts(0, 1, revision=2), ()),
    "update without surge: stop one old first": (
        service(revision=2, updating=True, max_surge=0, max_unavailable=1),
        [replica(1, 0), replica(2, 1), replica(3, 2)], (), (ReplicaStop(1, "updating to revision 2"),)),
}


@pytest.mark.parametrize(("svc", "jobs", "want_starts", "want_stops"), CASES.values(), ids=CASES.keys())
def test_reconcile(svc: Service, jobs: list[Job], want_starts, want_stops) -> None:
    plan = reconcile(svc, jobs, now=10.0)
    assert (plan.submit, plan.stop, plan.rollback) == (want_starts, want_stops, False)


def test_an_update_is_done_when_every_replica_is_of_the_new_revision() -> None:
    plan = reconcile(service(revision=2, updating=True), [replica(i, i, 2) for i in range(3)], now=10.0)
    assert plan.update_done and plan.next_at is None


def test_an_update_rolls_back_when_a_new_replica_is_not_ready_in_time() -> None:
    svc = service(revision=2, updating=True, ready_timeout_s=60)
    jobs = [replica(1, 0), replica(4, 0, 2, ready=False, submitted=5.0), replica(2, 1), replica(3, 2)]
    assert reconcile(svc, jobs, now=64.0).next_at == 65.0 and not reconcile(svc, jobs, now=64.0).rollback
    assert reconcile(svc, jobs, now=65.0).rollback


@pytest.mark.parametrize(("inflight", "rps", "want"), [(0, 0, 1), (1, 1, 1), (9, 0, 3), (1000, 0, 5)])
def test_autoscaled(inflight: float, rps: float, want: int) -> None:
    spec_ = SPEC.model_copy(update={"autoscale": SPEC.model_validate(
        {**SPEC.model_dump(), "autoscale": {"min_replicas": 1, "max_replicas": 5, "target_inflight": 4}}).autoscale})
    svc = Service(spec=spec_, revision=1, desired_replicas=1, created=0.0, load=(inflight, rps, 10.0))
    assert autoscaled(svc, 10.0) == want


def test_scale_to_zero_after_idle() -> None:
    spec_ = SPEC.model_validate({**SPEC.model_dump(), "autoscale": {
        "min_replicas": 1, "max_replicas": 5, "target_rps": 10, "scale_to_zero": True, "idle_s": 60}})
    svc = Service(spec=spec_, revision=1, desired_replicas=1, created=0.0, load=(0, 0, 100.0), last_busy=50.0)
    assert autoscaled(svc, 100.0) == 1 and autoscaled(svc, 110.0) == 0
