"""Stopping the cluster: running jobs are killed and requeued (or end NODE_FAIL), pending ones wait, and
nothing starts any more."""
from __future__ import annotations

import dataclasses
import signal

from corral.engine.commands import Kill
from corral.engine.history import history_to_json
from corral.engine.records import JobState
from tests.engine.builders import T0, engine_with_nodes, spec


def test_running_jobs_are_killed_everywhere_then_requeued_with_the_same_id() -> None:
    engine = engine_with_nodes(count=2, gpus=2)
    gang = engine.submit(spec(nodes=2, gpus=2), T0)
    waiting = engine.submit(spec(nodes=2, gpus=2), T0)
    engine.schedule(T0)
    for node in ("node1", "node2"):
        engine.node_started(node, gang.id, T0 + 1)

    stop = engine.stop_cluster(T0 + 10)

    assert (stop.requeue, stop.end, stop.already_stopping, stop.pending) == ((gang.id,), (), (), 1)
    assert stop.commands == [Kill(gang.id, n, signal.SIGTERM, engine.config.kill_grace_s, reason="requeue")
                             for n in ("node1", "node2")]
    assert gang.state is JobState.COMPLETING, "its GPUs stay held until its tasks are reported gone"
    engine.node_finished("node1", gang.id, [(0, 0, signal.SIGTERM)], None, T0 + 11)
    assert gang.state is JobState.COMPLETING
    engine.node_finished("node2", gang.id, [(1, 0, signal.SIGTERM)], None, T0 + 12)
    assert (gang.state, gang.restart_count, gang.start_time) == (JobState.PENDING, 1, None)
    assert [h.EVENT for h in gang.history] == ["cluster-stopped", "requeued"]
    assert gang.history[0].outcome == "requeued"
    assert waiting.state is JobState.PENDING
    assert engine.schedule(T0 + 13) == [], "a stopping cluster starts nothing, not even the requeued job"
    assert gang.state is JobState.PENDING and waiting.state is JobState.PENDING


def test_a_job_that_may_not_be_requeued_ends_node_fail() -> None:
    engine = engine_with_nodes(count=1)
    job = engine.submit(dataclasses.replace(spec(), requeue=False), T0)
    engine.schedule(T0)

    stop = engine.stop_cluster(T0 + 5)

    assert (stop.requeue, stop.end) == ((), (job.id,))
    engine.node_finished("node1", job.id, [(0, 0, signal.SIGTERM)], None, T0 + 6)
    assert job.state is JobState.NODE_FAIL and job.end_time == T0 + 6
    assert history_to_json(job.history[-1]) == {"t": T0 + 5, "event": "cluster-stopped", "outcome": "NODE_FAIL"}


def test_an_allocation_is_not_requeued_its_holder_goes_away_with_the_cluster() -> None:
    engine = engine_with_nodes(count=1)
    job = engine.submit(dataclasses.replace(spec(), allocation=True), T0)
    engine.schedule(T0)

    stop = engine.stop_cluster(T0 + 5)

    assert stop.end == (job.id,) and stop.commands == []
    assert job.state is JobState.NODE_FAIL, "nothing of it ran on the nodes: it ends at once"


def test_a_job_already_being_stopped_ends_as_it_was_going_to() -> None:
    engine = engine_with_nodes(count=1)
    job = engine.submit(spec(), T0)
    engine.schedule(T0)
    engine.cancel(job.id, T0 + 1)

    stop = engine.stop_cluster(T0 + 2)

    assert (stop.requeue, stop.end, stop.already_stopping, stop.commands) == ((), (), (job.id,), [])
    engine.node_finished("node1", job.id, [(0, 0, signal.SIGTERM)], None, T0 + 3)
    assert job.state is JobState.CANCELLED


def test_a_stopping_engine_has_no_deadline_that_stays_due() -> None:
    engine = engine_with_nodes(count=1, start_delay_s=0.3)
    engine.submit(spec(), T0)  # just submitted: it may not start before T0 + 0.3
    engine.stop_cluster(T0 + 0.1)
    assert engine.schedule(T0 + 1) == []
    deadline = engine.next_deadline(T0 + 1)
    assert deadline is None or deadline > T0 + 1, "the controller's loop would spin"
