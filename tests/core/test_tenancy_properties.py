"""Properties of quota, limits and preemption over generated clusters."""
from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.model import Cap, QueueQuota, Reason
from corral.core.quota import QuotaBook
from corral.core.scheduler import schedule
from corral.core.snapshot import Snapshot
from tests.core.builders import NOW, job, node, running, snapshot

QUEUES = [QueueQuota("a", {"gpu": 6}, cohort="c", borrowing_limit={"gpu": 4}),
          QueueQuota("b", {"gpu": 6}, cohort="c", lending_limit={"gpu": 2}),
          QueueQuota("solo", {"gpu": 4})]


@st.composite
def tenant_cluster(draw) -> Snapshot:
    rng = random.Random(draw(st.integers(0, 2**32)))
    names = [f"n{i}" for i in range(rng.randint(1, 4))]
    free = {n: list(range(8)) for n in names}
    book = QuotaBook(QUEUES, [])
    runs = []
    for rid in range(100, 100 + rng.randint(0, 8)):
        n, want, queue = rng.choice(names), rng.randint(1, 4), rng.choice(["a", "b", "solo", ""])
        if len(free[n]) < want or (queue and book.shortfall(queue, {"gpu": want}) is not None):
            continue  # the running state itself respects quota, as it would have been admitted
        devices = tuple(free[n][:want])
        del free[n][:want]
        book.charge(queue, {"gpu": want})
        runs.append(running(rid, rng.choice([60, 600]), (n, devices), queue=queue, qos=rng.choice(["low", "normal"]),
                            priority=rng.randint(0, 10), preemptible_from=rng.choice([None, NOW - 1, NOW + 50]),
                            charges=(("user:u", 1),), start_time=NOW - rng.randint(1, 500)))
    cap = Cap("user:u", rng.randint(1, 6), 1, Reason.ASSOC_MAX_JOBS)
    pending = []
    for jid in range(1, rng.randint(1, 15) + 1):
        high = rng.random() < 0.3
        pending.append(job(jid, gpus=rng.choice([1, 2, 4, 8]), queue=rng.choice(["a", "b", "solo", ""]),
                           caps=(cap,) if rng.random() < 0.5 else (), priority=rng.randint(0, 20),
                           qos="high" if high else "normal",
                           preempts_qos=frozenset({"low"}) if high else frozenset()))
    return snapshot([node(n, gpus=8) for n in names], pending, runs, queues=QUEUES)


@settings(max_examples=300, deadline=None)
@given(tenant_cluster())
def test_quota_and_limits_hold_after_the_cycle(snap: Snapshot) -> None:
    plan = schedule(snap)
    book = QuotaBook(QUEUES, snap.running)
    by_id = {j.id: j for j in snap.pending}
    used = defaultdict(int)
    for r in snap.running:
        for key, amount in r.charges:
            used[key] += amount
    for start in plan.starts:
        job = by_id[start.job_id]
        gpus = sum(len(s.gpus) for s in start.slices)
        if job.queue:
            assert book.shortfall(job.queue, {"gpu": gpus}) is None, "a start broke its queue's quota"
            book.charge(job.queue, {"gpu": gpus})
        for cap in job.caps:
            used[cap.key] += cap.amount
            assert used[cap.key] <= cap.limit, "a start broke a counted limit"


@settings(max_examples=300, deadline=None)
@given(tenant_cluster())
def test_victims_rank_below_or_hold_borrowed_capacity(snap: Snapshot) -> None:
    plan = schedule(snap)
    running = {r.id: r for r in snap.running}
    pending = {j.id: j for j in snap.pending}
    book = QuotaBook(QUEUES, snap.running)
    victims = [p.victim_id for p in plan.preemptions]
    assert len(victims) == len(set(victims)), "nobody is preempted twice"
    for p in plan.preemptions:
        victim, preemptor = running[p.victim_id], pending[p.preemptor_id]
        assert victim.preemptible_from is not None and victim.preemptible_from <= NOW
        if p.cause == "priority":
            assert victim.qos in preemptor.preempts_qos
        else:
            assert book.borrowing(victim.queue) and victim.queue != preemptor.queue
    started = {s.job_id for s in plan.starts}
    assert not (started & {p.preemptor_id for p in plan.preemptions}), "a preemptor waits for its victims"
