"""Fair share over a simulated day, through the production engine and the simulator driver."""
from __future__ import annotations

import pytest

from corral.api.schemas import JobSubmit
from corral.api.tenancy import TenancySpec
from corral.engine.config import EngineConfig
from corral.sim.driver import SimNode, SimSubmission, Simulation

DAY_S = 86400.0


def tenancy(shares_a: int, shares_b: int) -> TenancySpec:
    return TenancySpec(
        accounts=[{"name": "lab"}, {"name": "a", "parent": "lab", "shares": shares_a},
                  {"name": "b", "parent": "lab", "shares": shares_b}],
        users=[{"name": "alice", "accounts": ["a"]}, {"name": "bob", "accounts": ["b"]}],
        priority={"weight_age": 0, "weight_fairshare": 10000, "calc_period_s": 60})


def backlog(user: str, account: str, count: int) -> list[SimSubmission]:
    sub = JobSubmit(name="train", user=user, argv=["true"], workdir="/", gpus_per_node=1, time_limit_s=7200,
                    partition="gpu", account=account, qos="normal")
    return [SimSubmission(0.0, sub, 3600.0) for _ in range(count)]


def gpu_hours_by_account(sim: Simulation, until_s: float) -> dict[str, float]:
    hours: dict[str, float] = {}
    jobs = list(sim.result.finished) + [j for j in sim.engine.jobs.values() if j.start_time is not None]
    for job in jobs:
        end = min(job.end_time if job.end_time is not None else until_s, until_s)
        hours[job.spec.account] = hours.get(job.spec.account, 0.0) + job.gpu_count * max(0, end - job.start_time) / 3600
    return hours


@pytest.mark.parametrize("shares, want_ratio", [((1, 1), 1.0), ((2, 1), 2.0)])
def test_accounts_converge_to_their_shares_over_a_day(shares, want_ratio) -> None:
    sim = Simulation(EngineConfig(), [SimNode(f"n{i}", 8) for i in range(2)], tenancy(*shares))
    # a's whole backlog is submitted first: without fair share, FIFO would give it everything.
    sim.submit(backlog("alice", "a", 400) + backlog("bob", "b", 400))
    sim.run(until_s=DAY_S)
    hours = gpu_hours_by_account(sim, DAY_S)
    assert hours["a"] + hours["b"] == pytest.approx(16 * 24, rel=0.02), "the cluster stays full"
    assert hours["a"] / hours["b"] == pytest.approx(want_ratio, rel=0.05)


def test_without_fair_share_fifo_starves_the_later_account() -> None:
    spec = tenancy(1, 1)
    spec = spec.model_copy(update={"priority": spec.priority.model_copy(update={"weight_fairshare": 0})})
    sim = Simulation(EngineConfig(), [SimNode(f"n{i}", 8) for i in range(2)], spec)
    sim.submit(backlog("alice", "a", 400) + backlog("bob", "b", 400))
    sim.run(until_s=DAY_S)
    hours = gpu_hours_by_account(sim, DAY_S)
    assert hours.get("b", 0.0) == 0.0, "the control: the convergence above is fair share's doing"
