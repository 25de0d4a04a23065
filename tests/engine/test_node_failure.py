"""A node fails under a running job, as Slurm handles it: a job that allows requeue (the default) has its whole
gang stopped and is requeued with the same id and its restart count up by one; a job that may not be requeued
(--no-requeue, an allocation) ends NODE_FAIL. With --requeue=expedite (Slurm 25.11) the requeued job goes first
and the healthy nodes it ran on are held for it."""
from __future__ import annotations

import dataclasses
import signal

from corral.engine.commands import Kill, Launch
from corral.engine.history import NodeFailed, history_to_json
from corral.engine.records import JobState
from tests.engine.builders import T0, engine_with_nodes, inventory, spec


def _lose_silent_node(engine, lost: str, alive: tuple[str, ...], now: float) -> list:
    """Every node but `lost` is heard from; the engine then notices `lost` has been silent too long."""
    for name in alive:
        engine.contact(name, now - 1)
    return engine.tick(now)


def test_a_silent_node_requeues_its_job_which_runs_again_elsewhere_with_its_restart_count() -> None:
    engine = engine_with_nodes(count=2)
    job = engine.submit(spec(gpus=4), T0)
    engine.schedule(T0)
    first = job.slices[0].node
    other = "node2" if first == "node1" else "node1"
    engine.node_started(first, job.id, T0 + 1)
    lost_at = T0 + engine.config.node_timeout_s + 1
    commands = _lose_silent_node(engine, first, (other,), lost_at)
    assert commands == [], "its only node is gone: nothing is left to kill"
    assert (job.id in engine.jobs, job.state, job.restart_count) == (True, JobState.PENDING, 1)
    assert [history_to_json(h) for h in job.history[-2:]] == [
        {"t": lost_at, "event": "node-failed", "node": first, "outcome": "requeued"},
        {"t": lost_at, "event": "requeued", "run_start": T0, "run_end": lost_at, "cause": f"node failure {first}"}]
    assert engine.schedule(lost_at + 1) == [Launch(job.id, other)], "same id, on the node still up"
    assert (job.state, job.restart_count, job.node_names) == (JobState.RUNNING, 1, (other,))


def test_a_job_that_may_not_be_requeued_ends_node_fail() -> None:
    engine = engine_with_nodes(count=1)
    job = engine.submit(dataclasses.replace(spec(), requeue=False), T0)
    engine.schedule(T0)
    engine.node_lost("node1", T0 + 5)
    assert (job.state, job.restart_count, job.end_time) == (JobState.NODE_FAIL, 0, T0 + 5)
    assert job.history[-1] == NodeFailed(T0 + 5, "node1", "NODE_FAIL")


def test_an_allocation_is_never_requeued_its_holder_is_gone() -> None:
    engine = engine_with_nodes(count=1)
    job = engine.submit(dataclasses.replace(spec(), argv=(), allocation=True), T0)
    engine.schedule(T0)
    engine.node_lost("node1", T0 + 5)
    assert (job.state, job.restart_count) == (JobState.NODE_FAIL, 0)


def test_a_gang_losing_one_node_is_killed_on_the_others_then_requeued() -> None:
    engine = engine_with_nodes(count=3)
    job = engine.submit(spec(nodes=2, gpus=4), T0)
    engine.schedule(T0)
    lost, kept = job.node_names
    commands = engine.node_lost(lost, T0 + 5)
    assert commands == [Kill(job.id, kept, signal.SIGTERM, engine.config.kill_grace_s, reason="node-failure")]
    assert (job.state, job.final_state) == (JobState.COMPLETING, JobState.PENDING), \
        "held until the rest of the gang is gone"
    assert engine.schedule(T0 + 6) == [], "its nodes are not free before the kill is reported"
    engine.node_finished(kept, job.id, [(1, 0, signal.SIGTERM)], None, T0 + 7)
    assert (job.state, job.restart_count, job.slices, job.runs) == (JobState.PENDING, 1, (), {})
    restarted = engine.schedule(T0 + 8)
    assert sorted(c.node for c in restarted) == sorted(n for n in ("node1", "node2", "node3") if n != lost)


def test_an_agent_back_without_the_job_requeues_it() -> None:
    engine = engine_with_nodes(count=1)
    job = engine.submit(spec(), T0)
    engine.schedule(T0)
    engine.node_started("node1", job.id, T0 + 1)
    kill, _ = engine.register_node("node1", inventory(), set(), set(), T0 + 5)  # the agent restarted
    assert kill == []
    assert (job.state, job.restart_count) == (JobState.PENDING, 1)
    assert engine.schedule(T0 + 6) == [Launch(job.id, "node1")], "the node is up again: it runs there"


def _expedite_setup(expedite: bool):
    """node1 and node2 run job `gang` (2 whole nodes), node3 runs `filler`; `other` (1 whole node, higher
    priority, submitted earlier) waits. node1 fails; node2's part of the gang is killed and reported gone."""
    engine = engine_with_nodes(count=3, expedite_hold_s=120.0, node_timeout_s=1000.0)
    other_spec = dataclasses.replace(spec(gpus=4, name="other"), priority=1000)
    gang = engine.submit(dataclasses.replace(spec(nodes=2, gpus=4, name="gang"), expedited_requeue=expedite), T0)
    filler = engine.submit(spec(gpus=4, name="filler", limit_s=3600), T0)
    engine.schedule(T0)
    assert {gang.node_names, filler.node_names} == {("node1", "node2"), ("node3",)}, "place as the test expects"
    other = engine.submit(other_spec, T0 + 1)
    engine.node_lost("node1", T0 + 10)
    engine.node_finished("node2", gang.id, [(1, 0, signal.SIGTERM)], None, T0 + 11)
    assert (gang.state, gang.restart_count) == (JobState.PENDING, 1)
    return engine, gang, filler, other


def test_without_expedite_another_job_takes_the_freed_node() -> None:
    engine, gang, _, other = _expedite_setup(expedite=False)
    assert engine.schedule(T0 + 12) == [Launch(other.id, "node2")]


def test_expedite_holds_the_healthy_nodes_for_the_requeued_job_and_puts_it_first() -> None:
    engine, gang, filler, other = _expedite_setup(expedite=True)
    assert (gang.expedited, gang.hold_nodes, gang.hold_until) == (True, ("node2",), T0 + 11 + 120.0), \
        "held from the requeue"
    assert [h.EVENT for h in gang.history] == ["node-failed", "requeued", "nodes-held"]
    assert history_to_json(gang.history[-1]) == {"t": T0 + 11, "event": "nodes-held", "nodes": ["node2"],
                                                 "until": gang.hold_until}
    assert engine.pending[gang.id].order < engine.pending[other.id].order, "first, whatever the priorities"
    assert engine.schedule(T0 + 12) == [], "node2 is held for the gang, which needs another node too"
    assert other.state is JobState.PENDING
    assert engine.next_deadline(T0 + 12) <= gang.hold_until, "the engine wakes to let the hold go"
    engine.node_finished("node3", filler.id, [(0, 0, 0)], None, T0 + 20)
    assert sorted(c.node for c in engine.schedule(T0 + 21)) == ["node2", "node3"]
    assert (gang.state, gang.restart_count, gang.expedited, gang.hold_nodes) == (JobState.RUNNING, 1, False, ())


def test_an_expedited_hold_lapses_after_expedite_hold_s() -> None:
    engine, gang, _, other = _expedite_setup(expedite=True)
    engine.schedule(T0 + 12)
    until = gang.hold_until
    engine.tick(until)
    assert (gang.hold_nodes, gang.hold_until, gang.expedited) == ((), None, True), "still first, holding nothing"
    assert engine.schedule(until + 1) == [Launch(other.id, "node2")]


def test_a_job_ending_on_a_node_that_is_down_gives_its_gpus_back_without_breaking_the_pool() -> None:
    """Found by the stateful test: a gang loses node1 (requeued, COMPLETING), a job takes node2's other
    GPU, node3 goes down too; the gang's end on node1 (down, so in no bucket) then gave node1 more free
    GPUs than the partition's bucket list reached, and the pool raised IndexError."""
    engine = engine_with_nodes(count=3, gpus=4, node_timeout_s=50, kill_grace_s=5)
    gang = engine.submit(spec(nodes=2, gpus=1, limit_s=10), T0)
    engine.schedule(T0)
    assert gang.node_names == ("node1", "node2")
    engine.node_lost("node1", T0)
    single = engine.submit(spec(nodes=1, gpus=1, limit_s=10), T0)
    engine.schedule(T0)
    assert (gang.state, single.state) == (JobState.COMPLETING, JobState.RUNNING)
    engine.node_lost("node3", T0)
    engine.schedule(T0)
    engine.node_started("node2", gang.id, T0)
    engine.node_finished("node2", gang.id, [(0, 0, 0)], None, T0)
    assert gang.state is JobState.PENDING and gang.restart_count == 1, "requeued, its GPUs back"
    engine.register_node("node1", inventory(4), set(), set(), T0 + 1)
    engine.schedule(T0 + 1)
    assert gang.state is JobState.RUNNING and set(gang.node_names) == {"node1", "node2"}


def test_a_late_report_of_an_earlier_run_does_not_end_the_run_again_on_the_same_node() -> None:
    """Self-fencing (decision 0017): a node cut off from the controller is declared down and its job requeued;
    the node comes back and runs the job again before its agent delivers the end of the first run (killed by
    its leaders): that report is about run 0 and must not end run 1."""
    from corral.engine import events as ev

    engine = engine_with_nodes(count=1)
    job = engine.submit(spec(), T0)
    engine.schedule(T0)
    engine.node_started("node1", job.id, T0 + 1)
    engine.node_lost("node1", T0 + 40)
    assert (job.state, job.restart_count) == (JobState.PENDING, 1)
    engine.register_node("node1", inventory(), set(), {job.id}, T0 + 50)  # back, its old end unacknowledged
    assert engine.schedule(T0 + 51) == [Launch(job.id, "node1")]
    engine.handle(ev.TasksStarted("node1", job.id, restart_count=0), now=T0 + 52)
    assert job.runs["node1"].started is False, "run 0's start is not run 1's"
    engine.handle(ev.TasksFinished("node1", job.id, ((0, 0, signal.SIGKILL),), fenced="lost contact",
                                   restart_count=0), now=T0 + 52)
    assert (job.state, job.restart_count, job.runs["node1"].finished) == (JobState.RUNNING, 1, False)
    engine.handle(ev.TasksStarted("node1", job.id, restart_count=1), now=T0 + 53)
    engine.handle(ev.TasksFinished("node1", job.id, ((0, 0, 0),), restart_count=1), now=T0 + 60)
    assert (job.state, job.restart_count) == (JobState.COMPLETED, 1)


def test_a_run_fenced_before_its_node_was_declared_down_is_requeued_as_after_a_node_failure() -> None:
    """The agent's leaders killed the tasks (contact lost for fence_after_s) and contact came back before
    node_timeout_s: the controller never saw the node down, but the run ended for a node failure."""
    from corral.engine import events as ev

    engine = engine_with_nodes(count=1)
    job = engine.submit(spec(), T0)
    engine.schedule(T0)
    engine.node_started("node1", job.id, T0 + 1)
    engine.handle(ev.TasksFinished("node1", job.id, ((0, 0, signal.SIGKILL),),
                                   fenced="lost contact with the controller for 20 s", restart_count=0), now=T0 + 30)
    assert (job.state, job.restart_count) == (JobState.PENDING, 1)
    assert job.history[-2].EVENT == "node-failed"
