"""Slurm's documented fair-share behaviour (classic factor F = 2^(-U/S)) and usage decay."""
from __future__ import annotations

import pytest

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
