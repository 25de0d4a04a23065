"""Scenario tables for one scheduling cycle: nodes, running jobs, pending jobs -> started, reasons."""
from __future__ import annotations

import pytest

from corral.core.config import SchedulerConfig
from corral.core.model import Partition, Reason
from corral.core.scheduler import schedule
from tests.core.builders import NOW, job, node, running, snapshot

SCENARIOS = [
    dict(
        id="empty cluster starts everything that fits",
        nodes=[node("n1", gpus=8)], pending=[job(1, gpus=4), job(2, gpus=4), job(3, gpus=1)],
        want_started={1, 2}, want_reasons={3: Reason.RESOURCES},
    ),
    dict(
        id="gang of two nodes starts whole or not at all",
        nodes=[node("n1", gpus=4), node("n2", gpus=4, busy_gpus=(0,))],
        runs=[running(9, 600, ("n2", (0,)))],
        pending=[job(1, nodes=2, gpus=4)],
        want_started=set(), want_reasons={1: Reason.RESOURCES}, want_estimate={1: NOW + 600},
    ),
    dict(
        id="priority order beats submit order",
        nodes=[node("n1", gpus=4)], pending=[job(1, gpus=4), job(2, gpus=4, priority=10)],
        want_started={2}, want_reasons={1: Reason.RESOURCES},
    ),
    dict(
        id="short job backfills before a blocked gang without delaying it",
        nodes=[node("n1", gpus=4), node("n2", gpus=4)],
        runs=[running(9, 1000, ("n1", (0, 1, 2, 3)))],
        pending=[job(1, nodes=2, gpus=4, limit_s=3600), job(2, gpus=2, limit_s=900), job(3, gpus=2, limit_s=5000)],
        want_started={2}, want_reasons={1: Reason.RESOURCES, 3: Reason.RESOURCES},
        want_estimate={1: NOW + 1000},
    ),
    dict(
        id="with one reservation the long job waits with reason Priority",
        nodes=[node("n1", gpus=4), node("n2", gpus=4)],
        runs=[running(9, 1000, ("n1", (0, 1, 2, 3)))],
        pending=[job(1, nodes=2, gpus=4), job(2, gpus=2, limit_s=5000)],
        config=SchedulerConfig(max_reservations=1),
        want_started=set(), want_reasons={1: Reason.RESOURCES, 2: Reason.PRIORITY},
    ),
    dict(
        id="unknown partition",
        nodes=[node("n1")], pending=[job(1, partition="nope")],
        want_started=set(), want_reasons={1: Reason.INVALID_PARTITION},
    ),
    dict(
        id="partition down",
        nodes=[node("n1")], pending=[job(1)], partitions=[Partition("gpu", up=False)],
        want_started=set(), want_reasons={1: Reason.PARTITION_DOWN},
    ),
    dict(
        id="time limit over the partition's",
        nodes=[node("n1")], pending=[job(1, limit_s=7200)], partitions=[Partition("gpu", max_time_s=3600)],
        want_started=set(), want_reasons={1: Reason.PARTITION_TIME_LIMIT},
    ),
    dict(
        id="more nodes than the partition has",
        nodes=[node("n1"), node("n2")], pending=[job(1, nodes=3)],
        want_started=set(), want_reasons={1: Reason.PARTITION_NODE_LIMIT},
    ),
    dict(
        id="drained nodes leave too few: ReqNodeNotAvail",
        nodes=[node("n1"), node("n2", schedulable=False)], pending=[job(1, nodes=2)],
        want_started=set(), want_reasons={1: Reason.REQ_NODE_NOT_AVAIL},
    ),
    dict(
        id="held job never starts",
        nodes=[node("n1")], pending=[job(1, held=True)],
        want_started=set(), want_reasons={1: Reason.HELD},
    ),
    dict(
        id="cpu and memory limits count, not only GPUs",
        nodes=[node("n1", gpus=8, cpus=4, mem_mib=1000)], pending=[job(1, gpus=1, cpus=4), job(2, gpus=1, mem_mib=10)],
        want_started={1}, want_reasons={2: Reason.RESOURCES},
    ),
    dict(
        id="best fit: the fuller node takes the small job",
        nodes=[node("n1", gpus=8), node("n2", gpus=8, busy_gpus=(0, 1, 2, 3, 4, 5))],
        runs=[running(9, 600, ("n2", (0, 1, 2, 3, 4, 5)))],
        pending=[job(1, gpus=2)],
        want_started={1}, want_nodes={1: ("n2",)},
    ),
    dict(
        id="-w: the job goes to the node it names, not the fuller one",
        nodes=[node("n1", gpus=8), node("n2", gpus=8)], runs=[running(9, 600, ("n2", (0,)))],
        pending=[job(1, gpus=1, nodes_allowed=frozenset({"n1"}))],
        want_started={1}, want_nodes={1: ("n1",)},
    ),
    dict(
        id="-x/--constraint: the allowed node is full, so it waits rather than going elsewhere",
        nodes=[node("n1", gpus=2), node("n2", gpus=2)], runs=[running(9, 600, ("n1", (0, 1)))],
        pending=[job(1, gpus=1, nodes_allowed=frozenset({"n1"}))],
        want_started=set(), want_reasons={1: Reason.RESOURCES}, want_estimate={1: NOW + 600},
    ),
    dict(
        id="chosen nodes that can never hold the job: ReqNodeNotAvail",
        nodes=[node("n1", gpus=2), node("n2", gpus=8)],
        pending=[job(1, gpus=4, nodes_allowed=frozenset({"n1"}))],
        want_started=set(), want_reasons={1: Reason.REQ_NODE_NOT_AVAIL},
    ),
    dict(
        id="exclusive takes the whole idle node, and nothing is placed beside it",
        nodes=[node("n1", gpus=4, cpus=16, mem_mib=1000), node("n2", gpus=4, cpus=16, mem_mib=1000)],
        runs=[running(9, 600, ("n1", (0,)))],
        pending=[job(1, gpus=1, exclusive=True, priority=10), job(2, gpus=1), job(3, gpus=1)],
        want_started={1, 2, 3}, want_nodes={1: ("n2",), 2: ("n1",), 3: ("n1",)},
    ),
    dict(
        id="exclusive on a busy partition waits for a whole node; backfill keeps off it",
        nodes=[node("n1", gpus=4), node("n2", gpus=4)],
        runs=[running(9, 600, ("n1", (0,))), running(8, 900, ("n2", (0,)))],
        pending=[job(1, gpus=1, exclusive=True, priority=10), job(2, gpus=1, limit_s=5000),
                 job(3, gpus=1, limit_s=5000, nodes_allowed=frozenset({"n1"}))],
        config=SchedulerConfig(max_reservations=1),
        want_started={2}, want_nodes={2: ("n2",)}, want_reasons={1: Reason.RESOURCES, 3: Reason.PRIORITY},
        want_estimate={1: NOW + 600},
    ),
]


@pytest.mark.parametrize("case", SCENARIOS, ids=[c["id"] for c in SCENARIOS])
def test_scenario(case: dict) -> None:
    snap = snapshot(case["nodes"], case["pending"], case.get("runs", ()), case.get("partitions"))
    plan = schedule(snap, case.get("config", SchedulerConfig()))
    assert {s.job_id for s in plan.starts} == case["want_started"]
    reasons = {w.job_id: w.reason for w in plan.waiting}
    for job_id, reason in case.get("want_reasons", {}).items():
        assert reasons[job_id] == reason, job_id
    estimates = {w.job_id: w.estimated_start for w in plan.waiting}
    for job_id, when in case.get("want_estimate", {}).items():
        assert estimates[job_id] == pytest.approx(when)
    placed = {s.job_id: tuple(sl.node for sl in s.slices) for s in plan.starts}
    for job_id, nodes in case.get("want_nodes", {}).items():
        assert placed[job_id] == nodes


def test_devices_stay_inside_one_nvlink_domain_when_possible() -> None:
    # Domain nvl0 = {0,1,2,3}, nvl1 = {4,5,6,7}; 0 and 4 busy: a 3-GPU job fits in either island.
    snap = snapshot([node("n1", gpus=8)], [job(1, gpus=3)], [running(9, 60, ("n1", (0, 4)))])
    (start,) = schedule(snap).starts
    devices = set(start.slices[0].gpus)
    assert devices <= {1, 2, 3} or devices <= {5, 6, 7}


def test_split_only_when_no_domain_is_big_enough() -> None:
    snap = snapshot([node("n1", gpus=8)], [job(1, gpus=5)], [running(9, 60, ("n1", (0,)))])
    (start,) = schedule(snap).starts
    devices = start.slices[0].gpus
    assert len(devices) == 5 and {4, 5, 6, 7} <= set(devices)


def test_estimated_start_accounts_for_earlier_reservations() -> None:
    nodes = [node("n1", gpus=4)]
    runs = [running(9, 100, ("n1", (0, 1, 2, 3)))]
    plan = schedule(snapshot(nodes, [job(1, gpus=4, limit_s=500), job(2, gpus=4, limit_s=500)], runs))
    est = {w.job_id: w.estimated_start for w in plan.waiting}
    assert est[1] == pytest.approx(NOW + 100)
    assert est[2] == pytest.approx(NOW + 600)


def test_overdue_running_job_is_not_counted_free_now() -> None:
    # A job past its limit is being killed: its GPUs are not free in this cycle.
    snap = snapshot([node("n1", gpus=2)], [job(1, gpus=2)], [running(9, -50, ("n1", (0, 1)))])
    plan = schedule(snap)
    assert plan.starts == ()
    assert plan.waiting[0].estimated_start == pytest.approx(NOW + 1)


def test_strict_fifo_blocks_the_partition_behind_its_head() -> None:
    nodes = [node("n1", gpus=4)]
    runs = [running(9, 600, ("n1", (0, 1)))]
    plan = schedule(snapshot(nodes, [job(1, gpus=4), job(2, gpus=1, limit_s=60)], runs),
                    SchedulerConfig(backfill=False))
    assert plan.starts == ()
    assert {w.job_id: w.reason for w in plan.waiting} == {1: Reason.RESOURCES, 2: Reason.PRIORITY}
    plan = schedule(snapshot(nodes, [job(1, gpus=4), job(2, gpus=1, limit_s=60)], runs))
    assert [s.job_id for s in plan.starts] == [2], "with backfill the short job goes ahead"
