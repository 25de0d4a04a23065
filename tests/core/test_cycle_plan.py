"""CyclePlan's waiting jobs: a Reason alone per job that has nothing more to say (most of a long queue),
a Waiting record for one with an estimate, reserved nodes or a detail; `waiting` gives every one as a
Waiting record, in the order the cycle took them, and `reasons` gives the pairs without making any."""
from __future__ import annotations

import pytest

from corral.core.config import SchedulerConfig
from corral.core.model import CyclePlan, QueueQuota, Reason, Waiting
from corral.core.scheduler import schedule
from tests.core.builders import NOW, job, node, running, snapshot


def test_plain_waits_are_bare_reasons_and_a_reservation_is_a_record() -> None:
    runs = [running(9, 100, ("n1", (0, 1, 2, 3)))]
    pending = [job(1, gpus=4, limit_s=500, priority=10), job(2, gpus=4, limit_s=500), job(3, gpus=4, held=True)]
    plan = schedule(snapshot([node("n1", gpus=4)], pending, runs), SchedulerConfig(max_reservations=1))
    records = dict(plan.reasons())
    assert records[1] == Waiting(1, Reason.RESOURCES, NOW + 100, ("n1",))
    assert records[2] is Reason.RESOURCES and records[3] is Reason.HELD
    assert plan.waiting == (Waiting(1, Reason.RESOURCES, NOW + 100, ("n1",)), Waiting(2, Reason.RESOURCES),
                            Waiting(3, Reason.HELD))


def test_a_detail_makes_a_record() -> None:
    pending = [job(1, gpus=2, queue="solo"), job(2, gpus=1, queue="solo")]
    plan = schedule(snapshot([node("n1", gpus=8)], pending, queues=[QueueQuota("solo", {"gpu": 2})]))
    ((job_id, record),) = plan.reasons()
    assert job_id == 2 and isinstance(record, Waiting) and record.reason is Reason.QUEUE_QUOTA
    assert "nominal quota 2" in record.detail and plan.waiting == (record,)


def test_ids_and_records_must_pair() -> None:
    with pytest.raises(ValueError, match="2 waiting job ids for 1 records"):
        CyclePlan(waiting_ids=(1, 2), waiting_records=(Reason.PRIORITY,))
