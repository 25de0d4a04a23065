"""Node choice (-w/-x/--constraint resolved to PendingJob.nodes, and --exclusive) over generated clusters:
a job never lands outside its chosen nodes, an exclusive job holds its nodes whole and alone, and a backfill
reservation is never eaten by what starts beside it."""
from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.model import QueueQuota, Reason
from corral.core.scheduler import schedule
from tests.core.builders import NOW, job, node, running, snapshot


@st.composite
def cycles(draw):
    rng = random.Random(draw(st.integers(0, 2**32)))
    names = [f"n{i}" for i in range(draw(st.integers(1, 6)))]
    size = {n: rng.choice([(2, 8), (4, 16), (4, 16), (8, 64)]) for n in names}
    runs = []
    for rid in range(1000, 1000 + draw(st.integers(0, 6))):
        n = rng.choice(names)
        if any(s.node == n for r in runs for s in r.slices):
            continue
        want = rng.randint(1, size[n][0])
        runs.append(running(rid, rng.choice([60, 600, 3600]), (n, tuple(range(want))), cpus=want))
    pending = []
    for jid in range(1, draw(st.integers(1, 20)) + 1):
        chosen = frozenset(n for n in names if rng.random() < 0.5) if rng.random() < 0.6 else None
        pending.append(job(jid, nodes=rng.choice([1, 1, 2]), gpus=rng.choice([0, 1, 2]), cpus=rng.choice([1, 2]),
                           limit_s=rng.choice([60, 600, 7200]), priority=rng.choice([0, 5]),
                           submit=NOW - rng.randint(0, 100), nodes_allowed=chosen,
                           exclusive=rng.random() < 0.3))
    nodes = [node(n, gpus=size[n][0], cpus=size[n][1], mem_mib=1000) for n in names]
    return snapshot(nodes, pending, runs), {n: size[n] for n in names}


@settings(max_examples=300, deadline=None)
@given(cycles())
def test_jobs_stay_on_their_chosen_nodes_and_exclusive_jobs_alone(case) -> None:
    snap, size = case
    plan = schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    holders: dict[str, set[int]] = defaultdict(set)
    for r in snap.running:
        for s in r.slices:
            holders[s.node].add(r.id)
    for start in plan.starts:
        pending = jobs[start.job_id]
        for piece in start.slices:
            holders[piece.node].add(start.job_id)
            if pending.nodes is not None:
                assert piece.node in pending.nodes, (start.job_id, piece.node)
    for start in plan.starts:
        if jobs[start.job_id].exclusive:
            for piece in start.slices:
                assert holders[piece.node] == {start.job_id}, (start.job_id, piece.node, holders[piece.node])
                gpus, cpus = size[piece.node]
                assert (len(piece.gpus), piece.cpus, piece.mem_mib) == (gpus, cpus, 1000)


@settings(max_examples=200, deadline=None)
@given(cycles())
def test_reserved_nodes_of_an_exclusive_job_are_left_whole(case) -> None:
    """What starts in the same cycle never lands on a node an exclusive job's reservation holds from a
    time before the starter would end."""
    snap, _ = case
    plan = schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    for waiting in plan.waiting:
        if waiting.estimated_start is None or not jobs[waiting.job_id].exclusive:
            continue
        for start in plan.starts:
            ends = NOW + jobs[start.job_id].request.time_limit_s
            if ends > waiting.estimated_start:
                assert not {s.node for s in start.slices} & set(waiting.reserved_nodes)


def test_an_exclusive_job_is_held_to_its_queue_s_quota_for_the_whole_node() -> None:
    """A queue with quota for 2 GPUs cannot take a 4-GPU node whole by asking --exclusive for one GPU."""
    queues = [QueueQuota("q", {"gpu": 2})]
    nodes = [node("n1", gpus=4, cpus=16, mem_mib=1000)]
    plan = schedule(snapshot(nodes, [job(1, gpus=1, exclusive=True, queue="q")], queues=queues))
    assert not plan.starts and plan.waiting[0].reason is not Reason.NONE
    plan = schedule(snapshot(nodes, [job(1, gpus=1, exclusive=True, queue="q")],
                             queues=[QueueQuota("q", {"gpu": 4})]))
    assert [s.job_id for s in plan.starts] == [1]
