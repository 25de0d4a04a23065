"""Slurm's documented fair-share behaviour (classic factor F = 2^(-U/S)) and usage decay."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.api.tenancy import TenancySpec
from corral.core.model import NodeSlice, Request
from corral.engine.fairshare import FairShare
from corral.engine.records import Job, JobSpec, JobState

HALF_LIFE = 1000.0


def spec_for(shares: dict[str, int], parents: dict[str, str] | None = None) -> TenancySpec:
    parents = parents or {}
    return TenancySpec(accounts=[{"name": a, "shares": s, "parent": parents.get(a)} for a, s in shares.items()],
                       priority={"half_life_s": HALF_LIFE})


@pytest.mark.parametrize("usage_a, want", [
    (0.0, 1.0),      # no usage: the factor is 1
    (50.0, 0.5),     # usage equal to the share (50 of 100, share 0.5): 0.5
    (100.0, 0.25),   # twice the share: 0.25
])
def test_factor_is_two_to_the_minus_usage_over_shares(usage_a, want) -> None:
    fair = FairShare(spec_for({"a": 1, "b": 1}), {"a": usage_a, "b": 100.0 - usage_a})
    assert fair.factors()["a"] == pytest.approx(want)


def test_shares_normalize_down_the_tree_and_usage_rolls_up() -> None:
    fair = FairShare(spec_for({"lab": 1, "other": 1, "a": 3, "b": 1}, {"a": "lab", "b": "lab"}),
                     {"a": 30.0, "other": 70.0})
    report = {row["account"]: row for row in fair.report()}
    assert report["a"]["norm_shares"] == pytest.approx(0.5 * 0.75)
    assert report["lab"]["raw_usage"] == pytest.approx(30.0)
    assert report["a"]["fairshare"] == pytest.approx(2 ** (-0.30 / 0.375))


def test_usage_halves_every_half_life() -> None:
    fair = FairShare(spec_for({"a": 1}), {"a": 80.0}, as_of=0.0)
    fair.decay_to(HALF_LIFE)
    assert fair.usage["a"] == pytest.approx(40.0)
    fair.decay_to(3 * HALF_LIFE)
    assert fair.usage["a"] == pytest.approx(10.0)


def test_running_jobs_accrue_decayed_gpu_seconds() -> None:
    fair = FairShare(spec_for({"a": 1}), as_of=0.0)
    req = Request(num_nodes=1, gpus_per_node=2, partition="gpu")
    job = Job(1, JobSpec(name="j", user="u", request=req, account="a"), submit_time=0.0, state=JobState.RUNNING,
              start_time=0.0, slices=(NodeSlice("n", (0, 1), 1, 0),))
    fair.accrue([job], 10.0)
    assert fair.usage["a"] == pytest.approx(20.0, rel=1e-2), "2 GPUs x 10 s, barely decayed"
    fair.charge_job(job, 20.0)
    assert fair.usage["a"] == pytest.approx(40.0, rel=2e-2)
    fair.accrue([], 20.0 + HALF_LIFE)
    assert fair.usage["a"] == pytest.approx(20.0, rel=2e-2)


def _running(job_id: int, account: str, gpus: int, start: float) -> Job:
    req = Request(num_nodes=1, gpus_per_node=gpus, partition="gpu")
    return Job(job_id, JobSpec(name="j", user="u", request=req, account=account), submit_time=start,
               state=JobState.RUNNING, start_time=start, slices=(NodeSlice("n", tuple(range(gpus)), 1, 0),))


def _exact_usage(runs: list[tuple[str, int, float, float]], at: float) -> dict[str, float]:
    """Closed form: gpus x integral over [start, min(end, at)] of 2^(-(at - t)/half-life) dt."""
    k = math.log(2) / HALF_LIFE
    usage: dict[str, float] = {}
    for account, gpus, start, end in runs:
        end = min(end, at)
        if end > start:
            decayed = (math.exp(-k * (at - end)) - math.exp(-k * (at - start))) / k
            usage[account] = usage.get(account, 0.0) + gpus * decayed
    return usage


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 8), st.integers(0, 3000), st.integers(1, 3000)),
                min_size=1, max_size=12),
       st.lists(st.integers(0, 6000), max_size=20))
def test_accruing_at_any_times_sums_to_the_exact_decayed_integral(jobs, accrual_times) -> None:
    """Per-account rate sums (how accrual is done) charge exactly what each job's own integral says,
    whenever accruals happen and whatever ends in between."""
    fair = FairShare(spec_for({"a": 1, "b": 1}), as_of=0.0)
    runs = [(account, gpus, float(start), float(start + length)) for account, gpus, start, length in jobs]
    events = sorted({float(t) for t in accrual_times} | {end for *_, end in runs} | {6000.0})
    ended: set[int] = set()
    for now in events:
        for i, (account, gpus, start, end) in enumerate(runs):
            if i not in ended and end <= now:
                fair.charge_job(_running(i, account, gpus, start), end)
                ended.add(i)
        live = [_running(i, a, g, s) for i, (a, g, s, e) in enumerate(runs) if s <= now < e]
        fair.accrue(live, now)
    want = _exact_usage(runs, 6000.0)
    for account in "ab":
        assert fair.usage.get(account, 0.0) == pytest.approx(want.get(account, 0.0), rel=1e-6, abs=1e-6)


def test_a_restart_does_not_charge_running_jobs_twice() -> None:
    fair = FairShare(spec_for({"a": 1}), as_of=0.0)
    job = _running(1, "a", 4, 0.0)
    fair.accrue([job], 100.0)
    fair.charge_job(_running(2, "a", 1, 50.0), 150.0)  # moves the usage's own time past the live charges
    state = fair.state()
    restored = FairShare(spec_for({"a": 1}), state["usage"], state["as_of"], state["charged_to"])
    restored.accrue([job], 400.0)
    want = _exact_usage([("a", 4, 0.0, 400.0), ("a", 1, 50.0, 150.0)], 400.0)["a"]
    assert restored.usage["a"] == pytest.approx(want, rel=1e-9)
