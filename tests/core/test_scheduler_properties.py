"""Safety properties of one scheduling cycle, over generated clusters and queues."""
from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import SchedulerConfig
from corral.core.scheduler import schedule
from corral.core.snapshot import Snapshot
from tests.core.builders import NOW, job, node, running, snapshot


@st.composite
def cluster(draw) -> tuple[Snapshot, SchedulerConfig]:
    rng = random.Random(draw(st.integers(0, 2**32)))
    names = [f"n{i}" for i in range(draw(st.integers(1, 6)))]
    gpus = {n: rng.choice([2, 4, 8]) for n in names}
    cpus = {n: rng.choice([8, 16, 64]) for n in names}
    free = {n: list(range(gpus[n])) for n in names}
    free_cpus = dict(cpus)
    runs = []
    for rid in range(1000, 1000 + draw(st.integers(0, 10))):
        n = rng.choice(names)
        want = rng.randint(1, 4)
        if len(free[n]) < want or free_cpus[n] < want:
            continue
        devices = tuple(free[n][:want])
        del free[n][:want]
        free_cpus[n] -= want
        runs.append(running(rid, rng.choice([-5, 60, 300, 900, 3600]), (n, devices), cpus=want))
    pending = []
    for jid in range(1, draw(st.integers(1, 25)) + 1):
        pending.append(job(jid, nodes=rng.choice([1, 1, 1, 2, 3]), gpus=rng.choice([0, 1, 2, 4, 8]),
                           cpus=rng.choice([1, 2, 4]), limit_s=rng.choice([60, 600, 1800, 7200]),
                           priority=rng.choice([0, 0, 5]), submit=NOW - rng.randint(0, 100)))
    drained = {n for n in names if rng.random() < 0.15}
    nodes = [node(n, gpus=gpus[n], cpus=cpus[n], schedulable=n not in drained) for n in names]
    config = SchedulerConfig(max_reservations=draw(st.integers(0, 4)))
    return snapshot(nodes, pending, runs), config


def _plan(snap_config):
    snap, config = snap_config
    return snap, config, schedule(snap, config)


@settings(max_examples=300, deadline=None)
@given(cluster())
def test_no_device_or_capacity_is_double_allocated(sc) -> None:
    snap, _, plan = _plan(sc)
    views = {v.name: v for v in snap.nodes}
    used_gpus: dict[str, set[int]] = defaultdict(set)
    used_cpus: dict[str, int] = defaultdict(int)
    for start in plan.starts:
        for s in start.slices:
            view = views[s.node]
            assert view.schedulable
            assert set(s.gpus) <= view.free_gpus, "started on a device that was not free"
            assert not (set(s.gpus) & used_gpus[s.node]), "device given twice in one cycle"
            used_gpus[s.node] |= set(s.gpus)
            used_cpus[s.node] += s.cpus
    for name, cpus in used_cpus.items():
        assert cpus <= views[name].free_cpus


@settings(max_examples=300, deadline=None)
@given(cluster())
def test_gangs_are_all_or_nothing(sc) -> None:
    snap, _, plan = _plan(sc)
    by_id = {j.id: j for j in snap.pending}
    for start in plan.starts:
        req = by_id[start.job_id].request
        assert len(start.slices) == req.num_nodes
        assert len({s.node for s in start.slices}) == req.num_nodes
        assert all(len(s.gpus) == req.gpus_per_node and s.cpus == req.cpus_per_node for s in start.slices)
        assert all(req.partition in {v.name: v for v in snap.nodes}[s.node].partitions for s in start.slices)
    decided = [s.job_id for s in plan.starts] + [w.job_id for w in plan.waiting]
    assert sorted(decided) == sorted(by_id), "every pending job is started or given a reason, once"


@settings(max_examples=300, deadline=None)
@given(cluster())
def test_backfill_never_delays_a_reservation(sc) -> None:
    """Each reservation's start equals the one computed when only the jobs ahead of it (and it) exist:
    nothing lower in the queue moved it."""
    snap, config, plan = _plan(sc)
    order = sorted(snap.pending, key=lambda j: j.order)
    for wait in plan.waiting:
        if wait.estimated_start is None:
            continue
        cut = next(i for i, j in enumerate(order) if j.id == wait.job_id)
        alone = Snapshot(snap.now, snap.nodes, snap.partitions, snap.running, tuple(order[: cut + 1]))
        again = {w.job_id: w.estimated_start for w in schedule(alone, config).waiting}
        assert again[wait.job_id] == wait.estimated_start


@settings(max_examples=150, deadline=None)
@given(cluster(), st.randoms(use_true_random=False))
def test_same_input_same_output(sc, rnd) -> None:
    snap, config = sc
    shuffled = list(snap.pending)
    rnd.shuffle(shuffled)
    other = Snapshot(snap.now, snap.nodes, snap.partitions, snap.running, tuple(shuffled))
    assert schedule(snap, config) == schedule(other, config)
