"""A preemptor that waits for victims still being stopped holds the place it will take
(core/preemption.py: hold_for_stopping). Cycles driven here one by one as the engine drives them: a victim
that has stopped is requeued (pending, same QOS), one still stopping is a completing running job, the
preemptor carries its claim."""
from __future__ import annotations

from dataclasses import replace

from corral.core.model import CyclePlan, PendingJob, Reason, RunningJob
from corral.core.scheduler import schedule
from tests.core.builders import NOW, job, node, running, snapshot

LOW = {"qos": "low", "preemptible_from": NOW - 50}


def gang(**more: object) -> PendingJob:
    return job(1, nodes=2, gpus=2, qos="high", preempts_qos=frozenset({"low"}), priority=100, **more)


def replica(job_id: int) -> PendingJob:
    """A victim requeued once it stopped: lower priority than the gang, fits any one node."""
    return job(job_id, gpus=2, qos="low", priority=10)


def stopping(victim: RunningJob, now: float) -> RunningJob:
    return replace(victim, completing=True, expected_end=now + 30)


def waiting_reason(plan: CyclePlan, job_id: int) -> Reason:
    return next(w.reason for w in plan.waiting if w.job_id == job_id)


def test_a_gang_waiting_for_its_second_victim_keeps_what_the_first_freed_and_starts_when_both_are_gone():
    nodes = [node("n1", gpus=2), node("n2", gpus=2)]
    r11, r12 = running(11, 3600, ("n1", (0, 1)), **LOW), running(12, 3600, ("n2", (0, 1)), **LOW)
    first = schedule(snapshot(nodes, [gang()], [r11, r12]))
    assert {p.victim_id for p in first.preemptions} == {11, 12} and not first.starts

    # 11 has stopped and is requeued; 12 is still stopping. 11 fits on n1, which the gang needs.
    second = schedule(snapshot(nodes, [gang(claim=True), replica(11)], [stopping(r12, NOW + 1)], now=NOW + 1))
    assert not second.starts, "the requeued victim took back what it freed before the gang had both nodes"
    assert not second.preemptions
    assert waiting_reason(second, 1) is Reason.RESOURCES
    assert waiting_reason(second, 11) in (Reason.PRIORITY, Reason.RESOURCES)

    # 12 has stopped too: the gang starts on both nodes; the replicas wait for it.
    third = schedule(snapshot(nodes, [gang(claim=True), replica(11), replica(12)], [], now=NOW + 2))
    assert [(s.job_id, sorted(p.node for p in s.slices)) for s in third.starts] == [(1, ["n1", "n2"])]


def test_the_hold_takes_only_the_gangs_need_beside_the_victims():
    # Bigger nodes: 4 GPUs are free on n1 beside the 2 the stopped victim freed; a job of 4 still starts there.
    nodes = [node("n1", gpus=8, busy_gpus=range(2, 4)), node("n2", gpus=8, busy_gpus=range(2, 8))]
    r12 = running(12, 3600, ("n2", (0, 1)), **LOW)
    other = [running(20, 3600, ("n1", (2, 3))), running(21, 3600, ("n2", (2, 3, 4, 5, 6, 7)))]
    plan = schedule(snapshot(nodes, [gang(claim=True), job(30, gpus=4, priority=5), job(31, gpus=2, priority=1)],
                             [stopping(r12, NOW), *other]))
    assert [(s.job_id, [p.node for p in s.slices]) for s in plan.starts] == [(30, ["n1"])]
    assert waiting_reason(plan, 1) is Reason.RESOURCES
    assert waiting_reason(plan, 31) is not None

