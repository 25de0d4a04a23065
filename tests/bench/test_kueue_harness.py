"""bench/kueue_scenarios.py's harness on a small scenario: Kueue's generator schedule as corral submissions,
its ClusterQueues as cohort quota queues of a real controller, and the stand-in agents (the agent protocol
over HTTP, no processes) running each workload for its runtime. Every workload completes, runs about as long
as its class says, and no queue nor cohort ever holds more CPUs than its quota allows."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import kueue_scenarios as kueue  # noqa: E402

SMALL = kueue.Scenario(cohorts=1, queues_per_cohort=2, nominal_cpu=20, borrowing_limit_cpu=10, sets=(
    kueue.WorkloadSet("small", 30, 0.05, 0.2, 50, 4),
    kueue.WorkloadSet("large", 6, 0.3, 0.5, 200, 20)), published={})


def test_the_schedule_is_kueues_generator() -> None:
    plan = kueue.schedule_of(kueue.BASELINE, "/tmp")
    assert len(plan) == 15_000
    by_class: dict[str, int] = {}
    for _, body in plan:
        by_class[body["name"]] = by_class.get(body["name"], 0) + 1
    assert by_class == {"small": 10_500, "medium": 3_000, "large": 1_500}
    assert max(due for due, _ in plan) == pytest.approx(60.0)  # 50 large, one every 1.2 s
    assert {body["queue"] for _, body in plan} == {f"cq-{q}-cohort-{c}" for c in range(5) for q in range(6)}
    assert kueue.queue_config(kueue.BASELINE).count("[[queues]]") == 30


def peak_cpus(records: list[dict], key) -> dict[str, int]:
    """The most CPUs the jobs of each group (by `key`) held at one instant."""
    events: dict[str, list[tuple[float, int]]] = {}
    for job in records:
        events.setdefault(key(job), []).extend(
            [(job["start_time"], job["cpus_per_task"]), (job["end_time"], -job["cpus_per_task"])])
    peaks = {}
    for group, changes in events.items():
        held = peak = 0
        for _, delta in sorted(changes, key=lambda c: (c[0], c[1])):  # an end before a start at one instant
            held += delta
            peak = max(peak, held)
        peaks[group] = peak
    return peaks


@pytest.mark.slow  # a live controller and 20 stand-in nodes, ~15 s
def test_a_small_scenario_runs_through_the_live_controller_within_quota() -> None:
    records: list[dict] = []
    result = kueue.run("small", SMALL, records)
    assert result["final_states"] == {"COMPLETED": 72}
    assert set(result["time_to_admission"]) == {"small", "large"}
    for job in records:
        ran = job["end_time"] - job["start_time"]
        assert ran >= {"small": 0.2, "large": 0.5}[job["name"]] - 0.05, job
    # Each queue: nominal 20 + borrowing 10; the cohort: both queues' nominal (40).
    assert max(peak_cpus(records, lambda job: job["queue"]).values()) <= 30
    assert peak_cpus(records, lambda job: "cohort")["cohort"] <= 40
