"""Read-only views of tenancy state for the API: priorities (sprio), fair share (sshare), queues."""
from __future__ import annotations

from corral.api.tenancy import FairShareOut, PriorityOut, QueueOut, ReservationOut
from corral.core.quota import QuotaBook
from corral.engine.engine import Engine
from corral.engine.records import JobState
from corral.engine.reservations import Reservation


def priorities(engine: Engine) -> list[PriorityOut]:
    out = []
    for job_id, view in engine.views.pending.items():
        job, factors = engine.jobs[job_id], engine.views.factors[job_id]
        out.append(PriorityOut(
            job_id=job_id, user=job.spec.user, account=job.spec.account, partition=job.spec.request.partition,
            qos=job.spec.qos, priority=view.priority, age=factors.age, fairshare=factors.fairshare,
            job_size=factors.job_size, partition_factor=factors.partition, qos_factor=factors.qos,
            nice=factors.nice, array_job_id=job.spec.array_job_id, array_task_id=job.spec.array_task_id))
    out.sort(key=lambda p: (-p.priority, p.job_id))
    return out


def fairshare(engine: Engine) -> list[FairShareOut]:
    return [FairShareOut(**row) for row in engine.fairshare.report()]


def queues(engine: Engine) -> list[QueueOut]:
    book = QuotaBook(engine.tenancy.queues, engine.views.running.values())
    pending: dict[str, int] = {}
    running: dict[str, int] = {}
    for job in engine.jobs.values():
        counter = pending if job.state is JobState.PENDING else running
        counter[job.spec.queue] = counter.get(job.spec.queue, 0) + 1
    return [QueueOut(name=q.name, cohort=q.cohort, nominal=dict(q.nominal), usage=dict(book.usage[q.name]),
                     borrowing=book.borrowing(q.name), pending_jobs=pending.get(q.name, 0),
                     running_jobs=running.get(q.name, 0)) for q in engine.tenancy.queues]


def reservation_out(record: Reservation, now: float) -> ReservationOut:
    return ReservationOut(**record.spec.model_dump(), node_names=sorted(record.nodes),
                          active=record.spec.start <= now < record.spec.end)
