"""core.scheduler.in_order: the pending jobs in exactly the order of their `order` tuples (expedited, claim,
priority, submission, id), with ties on every field but the id, negative priorities, and ints and floats
mixed among the submission times; `PendingJob.order_key` (the one int it sorts by) at the edges of its
fields, and a clear error for a value it cannot hold."""
from __future__ import annotations

import random
from operator import attrgetter

import pytest

from corral.core.model import PendingJob, Request, order_key
from corral.core.scheduler import in_order


def _jobs(seed: int, count: int, ranks: bool) -> list[PendingJob]:
    rng = random.Random(seed)
    request = Request(gpus_per_node=1, time_limit_s=600)
    ids = rng.sample(range(1, count * 10), count)
    return [PendingJob(job_id, rng.choice((-5, 0, 0, 10, 100, 7_000_000)),
                       rng.choice((0, 1.5, 2, 2.0, 3.25, rng.uniform(0, 1e9))), request,
                       claim=ranks and rng.random() < 0.05, expedited=ranks and rng.random() < 0.02)
            for job_id in ids]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ranks", [False, True])
def test_in_order_is_the_order_tuples_sort(seed: int, ranks: bool) -> None:
    jobs = _jobs(seed, 3000, ranks)
    expected = sorted(jobs, key=attrgetter("order"))
    assert [j.id for j in in_order(jobs)] == [j.id for j in expected]
    assert [j.id for j in in_order(reversed(expected))] == [j.id for j in expected]


def test_expedited_before_claims_before_priority() -> None:
    request = Request(gpus_per_node=1, time_limit_s=600)
    jobs = [PendingJob(1, 100, 0.0, request), PendingJob(2, 0, 5.0, request, claim=True),
            PendingJob(3, -1, 9.0, request, expedited=True), PendingJob(4, 100, 0.0, request, claim=True)]
    assert [j.id for j in in_order(jobs)] == [3, 4, 2, 1]


EDGE_PRIORITIES = (-(1 << 63), -7, -1, 0, 1, 2**31 - 1, (1 << 63) - 1)
EDGE_TIMES = (float("-inf"), -1e300, -2.5, -5e-324, -0.0, 0.0, 0, 5e-324, 1.0, 1, 1.0000000000000002,
              1_700_000_000.123456, 1e300, float("inf"))
EDGE_IDS = (0, 1, 2**31, (1 << 64) - 1)


def test_the_order_key_orders_as_the_tuple_at_the_edges_of_its_fields() -> None:
    request = Request(gpus_per_node=1, time_limit_s=600)
    rng = random.Random(7)
    jobs = [PendingJob(rng.choice(EDGE_IDS), priority, submit, request, claim=rng.random() < 0.3,
                       expedited=rng.random() < 0.1)
            for priority in EDGE_PRIORITIES for submit in EDGE_TIMES for _ in range(3)]
    rng.shuffle(jobs)
    expected = sorted(jobs, key=attrgetter("order"))
    assert [j.order for j in in_order(jobs)] == [j.order for j in expected]
    # Equal keys exactly when equal tuples (-0.0 == 0.0 == 0 as submission times).
    for a, b in zip(expected, expected[1:], strict=False):
        assert (a.order_key == b.order_key) == (a.order == b.order)


@pytest.mark.parametrize(("priority", "submit", "job_id", "message"), [
    (1 << 63, 0.0, 1, "priority 9223372036854775808 is outside a signed 64-bit integer"),
    (-(1 << 63) - 1, 0.0, 1, "outside a signed 64-bit integer"),
    (0, 0.0, -1, "job id -1 is outside an unsigned 64-bit integer"),
    (0, 0.0, 1 << 64, "outside an unsigned 64-bit integer"),
    (0, float("nan"), 1, "job 1: submission time is NaN"),
])
def test_a_value_the_order_key_cannot_hold_is_refused(priority: int, submit: float, job_id: int,
                                                      message: str) -> None:
    with pytest.raises(ValueError, match=message):
        order_key(2, priority, submit, job_id)
    with pytest.raises(ValueError, match=message):
        PendingJob(job_id, priority, submit, Request(gpus_per_node=1, time_limit_s=600))
