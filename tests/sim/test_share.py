"""The share-guarantee measure: time a queue holds less than min(demand, nominal), beyond a grace period."""
from __future__ import annotations

import pytest

from corral.sim.metrics import JobResult
from corral.sim.share import share_guarantee
from tests.sim.builders import job, ran


def test_a_spell_counts_only_beyond_the_grace_period() -> None:
    # Queue a (nominal 8) wants 8 GPUs from t=0 but gets them at t=1000, for 1000 s: short 1000 s, 400
    # of them beyond a 600 s grace, over a 2000 s span.
    (a,) = share_guarantee([ran(job(1, gpus=8, queue="a", duration_s=1000), 1000)], {"a": 8}, grace_s=600)
    assert a.short_fraction == pytest.approx(400 / 2000)
    assert a.longest_short_s == 1000 and a.mean_shortfall_gpus == 8


def test_demand_below_nominal_and_above_it() -> None:
    # a (nominal 4) asks for 2 and gets them at once: never short. b (nominal 4) asks for 8 and holds 4
    # from the start: it has its nominal share although its demand is higher: never short.
    results = [ran(job(1, gpus=2, queue="a", duration_s=500), 0),
               ran(job(2, gpus=4, queue="b", duration_s=500), 0),
               ran(job(3, gpus=4, queue="b", duration_s=500), 500)]
    shares = {s.queue: s for s in share_guarantee(results, {"a": 4, "b": 4}, grace_s=0)}
    assert shares["a"].short_fraction == 0 and shares["b"].short_fraction == 0


def test_preempted_segments_are_not_held() -> None:
    preempted = JobResult(job(1, gpus=4, queue="a", duration_s=100), 0, 300, segments=((0, 100), (200, 300)))
    (a,) = share_guarantee([preempted], {"a": 4}, grace_s=0)
    assert a.short_fraction == pytest.approx(100 / 300) and a.longest_short_s == 100
