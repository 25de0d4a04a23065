"""core.scheduler.in_order: the pending jobs in exactly the order of their `order` tuples (expedited, claim,
priority, submission, id), with ties on every field but the id, negative priorities, and ints and floats
mixed among the submission times."""
from __future__ import annotations

import random
from operator import attrgetter

import pytest

from corral.core.model import PendingJob, Request
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
