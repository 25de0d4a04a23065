"""Tenancy through the engine: preemption with requeue, dependencies, holds, warning signals, limits."""
from __future__ import annotations

import dataclasses
import signal

import pytest

from corral.api.tenancy import TenancySpec
from corral.core.model import Gpu, Request
from corral.engine.build import build_engine
from corral.engine.commands import Kill, Launch
from corral.engine.config import SIMULATED, EngineConfig
from corral.engine.engine import Engine, WrongState
from corral.engine.history import Preempted
from corral.engine.membership import Inventory
from corral.engine.records import JobSpec, JobState
from tests.engine.harness import Harness

T0 = 1000.0
TENANCY = TenancySpec(
    accounts=[{"name": "a"}, {"name": "b"}],
    users=[{"name": "alice", "accounts": ["a"]}, {"name": "bob", "accounts": ["b"]}],
    qos=[{"name": "low", "grace_s": 30, "min_runtime_s": 10}, {"name": "normal", "priority": 5},
         {"name": "high", "priority": 10, "preempts": ["low"]}],
    queues=[{"name": "qa", "cohort": "c", "accounts": ["a"], "nominal": {"gpu": 4}},
            {"name": "qb", "cohort": "c", "accounts": ["b"], "nominal": {"gpu": 4}}],
    limits=[{"user": "alice", "max_running_jobs": 2}],
)


def engine(gpus: int = 8) -> Engine:
    e = Harness(build_engine(EngineConfig(), SIMULATED, tenancy=TENANCY))
    e.register_node("n1", Inventory(tuple(Gpu(i) for i in range(gpus)), 64, 512_000, "127.0.0.1"), set(), set(), T0)
    return e


def spec(user="alice", account="a", queue="qa", qos="normal", gpus=1, **more) -> JobSpec:
    req = Request(num_nodes=1, gpus_per_node=gpus, time_limit_s=more.pop("limit_s", 3600), partition="gpu")
    return JobSpec(name=more.pop("name", "j"), user=user, request=req, argv=("true",), account=account, qos=qos,
                   queue=queue, **more)


def finish(e: Engine, job_id: int, now: float, sig: int = 0) -> None:
    for node in list(e.jobs[job_id].runs):
        e.node_finished(node, job_id, [(0, 0, sig)], None, now)


def test_reclaim_preempts_with_grace_then_requeues_with_the_same_id() -> None:
    e = engine()
    borrowed = [e.submit(spec("bob", "b", "qb", qos="low", gpus=4), T0) for _ in range(2)]
    e.schedule(T0)
    assert all(j.state is JobState.RUNNING for j in borrowed), "qb borrows qa's idle quota"
    mine = e.submit(spec(gpus=4), T0 + 20)
    commands = e.schedule(T0 + 20)
    kills = [c for c in commands if isinstance(c, Kill)]
    assert len(kills) == 1 and kills[0].signal == signal.SIGTERM and kills[0].grace_s == 30
    assert kills[0].reason == "preemption", "requeued by preemption: slurmstepd says DUE TO PREEMPTION"
    victim = e.jobs[kills[0].job_id]
    assert victim.state is JobState.COMPLETING
    assert victim.history[-1] == Preempted(T0 + 20, mine.id, "reclaim")
    assert e.schedule(T0 + 21) == [], "no second victim while the first one exits"
    finish(e, victim.id, T0 + 25, signal.SIGTERM)
    assert victim.state is JobState.PENDING and victim.restart_count == 1
    assert victim.prior_gpu_seconds == pytest.approx(4 * 25)
    assert e.schedule(T0 + 25) == [Launch(mine.id, "n1")], "the reclaiming job gets its nominal quota"


def test_preempted_job_in_cancel_mode_ends_preempted() -> None:
    cancel_mode = TenancySpec(**{**TENANCY.model_dump(), "qos": [
        {"name": "low", "preempt_mode": "cancel"}, {"name": "normal", "priority": 5},
        {"name": "high", "priority": 10, "preempts": ["low"]}]})
    e = Harness(build_engine(EngineConfig(), SIMULATED, tenancy=cancel_mode))
    e.register_node("n1", Inventory(tuple(Gpu(i) for i in range(4)), 64, 512_000, "x"), set(), set(), T0)
    low = e.submit(spec(qos="low", gpus=4, queue=""), T0)
    e.schedule(T0)
    urgent = e.submit(spec(qos="high", gpus=4, queue=""), T0 + 1)
    assert [(c.job_id, c.reason) for c in e.schedule(T0 + 1)] == [(low.id, "preemption")]
    finish(e, low.id, T0 + 2, signal.SIGTERM)
    assert low.state is JobState.PREEMPTED and low.end_time == T0 + 2
    assert e.schedule(T0 + 2) == [Launch(urgent.id, "n1")]


def test_min_runtime_protects_young_jobs() -> None:
    e = engine(gpus=4)
    low = e.submit(spec(qos="low", gpus=4, queue=""), T0)
    e.schedule(T0)
    e.submit(spec(qos="high", gpus=4, queue=""), T0 + 5)
    assert e.schedule(T0 + 5) == [], "low has run 5 s of its 10 s minimum"
    assert e.next_deadline() == T0 + 10, "the engine wakes up when low becomes preemptible"
    assert any(isinstance(c, Kill) for c in e.schedule(T0 + 11))
    assert low.state is JobState.COMPLETING


def test_dependencies_wait_then_run_or_never() -> None:
    e = engine()
    first = e.submit(spec(queue=""), T0)
    ok = e.submit(spec(queue="", dependency=f"afterok:{first.id}"), T0)
    notok = e.submit(spec(queue="", dependency=f"afternotok:{first.id}"), T0)
    e.schedule(T0)
    assert (ok.reason, notok.reason) == ("Dependency", "Dependency")
    finish(e, first.id, T0 + 5)
    e.schedule(T0 + 5)
    assert ok.state is JobState.RUNNING
    assert notok.reason == "DependencyNeverSatisfied"


def test_singleton_runs_one_at_a_time() -> None:
    e = engine()
    jobs = [e.submit(spec(queue="", dependency="singleton", name="one"), T0) for _ in range(3)]
    e.schedule(T0)
    assert [j.state for j in jobs] == [JobState.RUNNING, JobState.PENDING, JobState.PENDING]
    finish(e, jobs[0].id, T0 + 1)
    e.schedule(T0 + 1)
    assert [j.state for j in jobs[1:]] == [JobState.RUNNING, JobState.PENDING]


def test_hold_release_and_running_limit() -> None:
    e = engine()
    held = e.submit(spec(queue=""), T0, held=True)
    others = [e.submit(spec(queue=""), T0) for _ in range(3)]
    e.schedule(T0)
    assert held.reason == "JobHeldUser"
    assert [j.state for j in others] == [JobState.RUNNING, JobState.RUNNING, JobState.PENDING]
    assert others[2].reason == "AssocMaxJobsLimit"
    e.hold(held.id, False, T0 + 1)
    assert [entry.EVENT for entry in held.history] == ["released"]  # held at submission: no "held" line
    e.hold(held.id, False, T0 + 1)  # released again: nothing changed, nothing more recorded
    assert [entry.EVENT for entry in held.history] == ["released"]
    with pytest.raises(WrongState):
        e.hold(others[0].id, True, T0 + 1)


def test_warning_signal_before_the_time_limit() -> None:
    e = engine()
    job = e.submit(dataclasses.replace(spec(queue="", limit_s=300), warn_signal=signal.SIGUSR1, warn_before_s=120), T0)
    e.schedule(T0)
    assert e.next_deadline() == T0 + 180
    commands = e.tick(T0 + 180)
    assert commands == [Kill(job.id, "n1", signal.SIGUSR1, -1.0, target="batch")]
    assert e.tick(T0 + 181) == [], "sent once"
    assert job.history[-1].EVENT == "signal"


def test_manual_requeue_needs_a_requeueable_running_job() -> None:
    e = engine()
    job = e.submit(spec(queue=""), T0)
    with pytest.raises(WrongState):
        e.requeue(job.id, T0)
    e.schedule(T0)
    assert [(type(c), c.reason) for c in e.requeue(job.id, T0 + 1)] == [(Kill, "requeue")]
    finish(e, job.id, T0 + 2, signal.SIGTERM)
    assert job.state is JobState.PENDING and job.restart_count == 1
    stubborn = e.submit(spec(queue="", requeue=False), T0)
    e.schedule(T0 + 3)
    with pytest.raises(WrongState, match="no-requeue"):
        e.requeue(stubborn.id, T0 + 3)


def test_signal_reaches_the_right_processes_without_ending_the_job() -> None:
    e = engine()
    batch = e.submit(dataclasses.replace(spec(queue=""), batch=True), T0)
    tasks = e.submit(spec(queue=""), T0)
    e.schedule(T0)
    assert e.signal(batch.id, signal.SIGUSR2, "steps", T0 + 1) == [], "a batch job has no steps yet"
    assert e.signal(batch.id, signal.SIGUSR2, "batch", T0 + 1) == [
        Kill(batch.id, "n1", signal.SIGUSR2, -1.0, target="batch")]
    assert e.signal(tasks.id, signal.SIGUSR1, "steps", T0 + 1) == [
        Kill(tasks.id, "n1", signal.SIGUSR1, -1.0, target="batch")], "a command job's tasks count as its steps"
    # slurmstepd announces SIGTERM and SIGKILL as a cancel, whoever sends them (real Slurm, scancel -s TERM).
    assert e.signal(batch.id, signal.SIGTERM, "batch", T0 + 1) == [
        Kill(batch.id, "n1", signal.SIGTERM, -1.0, target="batch", reason="cancelled")]
    assert batch.state is JobState.RUNNING and batch.history[-1].EVENT == "signaled"
    pending = e.submit(spec(queue="", gpus=8), T0 + 2)
    with pytest.raises(WrongState):
        e.signal(pending.id, signal.SIGUSR1, "full", T0 + 2)
