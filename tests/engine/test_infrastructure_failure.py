"""corral's own machinery fails under a run (its task leader killed, its cgroup removed, the agent's runner
broken): the agent says so on the finished report, and the engine decides it as one node failure of that
run (Lifecycle.fail_gang): the gang is stopped, the job requeued if it may be or ended NODE_FAIL, and the
history and the Reason name the failure. The tasks' exits in such a report are not the job's own."""
from __future__ import annotations

import dataclasses
import signal

from corral.engine import events as ev
from corral.engine.commands import Kill, Launch
from corral.engine.history import history_to_json
from corral.engine.records import InfrastructureFailure, JobState
from tests.engine.builders import T0, engine_with_nodes, inventory, spec

LEADER_KILLED = InfrastructureFailure("leader-killed", "task leader of rank 0 killed before it recorded the exit")


def _infrastructure_failed(engine, node: str, job_id: int, now: float, failure=LEADER_KILLED, run: int = 0):
    return engine.handle(ev.TasksFinished(node, job_id, ((0, 0, signal.SIGKILL),), restart_count=run,
                                          infrastructure=failure), now=now).commands


def test_a_killed_leader_requeues_the_job_with_a_history_line_and_the_restart_count() -> None:
    engine = engine_with_nodes(count=1)
    job = engine.submit(spec(), T0)
    engine.schedule(T0)
    engine.node_started("node1", job.id, T0 + 1)
    assert _infrastructure_failed(engine, "node1", job.id, T0 + 10) == []
    assert (job.state, job.restart_count, job.exit_code, job.exit_signal) == (JobState.PENDING, 1, 0, 0)
    assert [history_to_json(h) for h in job.history[-2:]] == [
        {"t": T0 + 10, "event": "infrastructure-failed", "node": "node1", "kind": "leader-killed",
         "reason": LEADER_KILLED.reason, "outcome": "requeued"},
        {"t": T0 + 10, "event": "requeued", "run_start": T0, "run_end": T0 + 10,
         "cause": f"infrastructure failure on node1: {LEADER_KILLED.reason}"}]
    assert engine.schedule(T0 + 11) == [Launch(job.id, "node1")], "the same id runs again"


def test_a_job_that_may_not_be_requeued_ends_node_fail_with_the_failure_as_its_reason() -> None:
    engine = engine_with_nodes(count=1)
    job = engine.submit(dataclasses.replace(spec(), requeue=False), T0)
    engine.schedule(T0)
    engine.node_started("node1", job.id, T0 + 1)
    removed = InfrastructureFailure("cgroup-removed", "cgroup /sys/fs/cgroup/corral/job_1/batch removed under it")
    _infrastructure_failed(engine, "node1", job.id, T0 + 10, removed)
    assert (job.state, job.restart_count, job.end_time) == (JobState.NODE_FAIL, 0, T0 + 10)
    assert job.reason == f"InfrastructureFailure:node1: {removed.reason}"
    assert history_to_json(job.history[-1]) == {"t": T0 + 10, "event": "infrastructure-failed", "node": "node1",
                               "kind": "cgroup-removed", "reason": removed.reason, "outcome": "NODE_FAIL"}
    assert (job.exit_code, job.exit_signal) == (0, signal.SIGKILL), "what killed it, as after a lost node"


def test_the_exits_of_an_infrastructure_failure_are_not_the_jobs_own() -> None:
    """Without the field the same exits (0:9) would end the job FAILED: the field alone decides."""
    engine = engine_with_nodes(count=2)
    plain, failed = engine.submit(spec(), T0), engine.submit(spec(), T0)
    engine.schedule(T0)
    engine.handle(ev.TasksFinished(next(iter(plain.runs)), plain.id, ((0, 0, signal.SIGKILL),),
                                   restart_count=0), now=T0 + 5)
    _infrastructure_failed(engine, next(iter(failed.runs)), failed.id, T0 + 5)
    assert (plain.state, failed.state) == (JobState.FAILED, JobState.PENDING)


def test_a_gang_with_a_failed_node_is_killed_on_its_other_nodes_then_requeued() -> None:
    engine = engine_with_nodes(count=3)
    job = engine.submit(spec(nodes=2, gpus=4), T0)
    engine.schedule(T0)
    failed, kept = job.node_names
    commands = _infrastructure_failed(engine, failed, job.id, T0 + 5)
    assert commands == [Kill(job.id, kept, signal.SIGTERM, engine.config.kill_grace_s, reason="node-failure")]
    assert (job.state, job.final_state) == (JobState.COMPLETING, JobState.PENDING)
    assert job.reason.startswith(f"InfrastructureFailure:{failed}: "), "a stopping job says why"
    engine.node_finished(kept, job.id, [(1, 0, signal.SIGTERM)], None, T0 + 7)
    assert (job.state, job.restart_count) == (JobState.PENDING, 1)


def test_a_job_already_being_cancelled_ends_as_it_was_going_to_and_its_history_names_the_failure() -> None:
    engine = engine_with_nodes(count=1)
    job = engine.submit(spec(), T0)
    engine.schedule(T0)
    engine.cancel(job.id, T0 + 2)
    assert job.state is JobState.COMPLETING
    _infrastructure_failed(engine, "node1", job.id, T0 + 3)
    assert (job.state, job.restart_count) == (JobState.CANCELLED, 0)
    assert history_to_json(job.history[-1]) == {"t": T0 + 3, "event": "infrastructure-failed", "node": "node1",
                               "kind": "leader-killed", "reason": LEADER_KILLED.reason}
    assert not job.reason.startswith("InfrastructureFailure"), "the cancel, not the failure, ended it"


def test_a_late_report_of_an_earlier_run_changes_nothing() -> None:
    engine = engine_with_nodes(count=1)
    job = engine.submit(spec(), T0)
    engine.schedule(T0)
    _infrastructure_failed(engine, "node1", job.id, T0 + 5)
    engine.schedule(T0 + 6)
    assert (job.state, job.restart_count) == (JobState.RUNNING, 1)
    _infrastructure_failed(engine, "node1", job.id, T0 + 7, run=0)  # re-sent after an agent restart
    assert (job.state, job.restart_count) == (JobState.RUNNING, 1)
    assert [h.EVENT for h in job.history].count("infrastructure-failed") == 1


def test_a_step_whose_leader_was_killed_ends_node_fail_and_its_other_nodes_are_killed() -> None:
    """A step's tasks lost to corral's own failure end the step NODE_FAIL (not FAILED 0:9); the job runs on and
    its batch script decides, as after an srun failed; the job's history names the failure."""
    from tests.engine.test_steps import batch_job, request

    engine = engine_with_nodes()
    job = batch_job(engine)
    step, _ = engine.start_step(job.id, request(ntasks=2), T0 + 1)
    failed, other = job.node_names
    commands = engine.handle(ev.StepTasksFinished(failed, job.id, 0, ((0, 0, signal.SIGKILL),),
                                                  infrastructure=LEADER_KILLED), now=T0 + 2).commands
    assert [(c.node, c.signal, c.target, c.step_id) for c in commands] == [(other, signal.SIGKILL, "steps", 0)]
    engine.step_finished(other, job.id, 0, [(1, 0, signal.SIGKILL)], None, T0 + 3)
    assert (step.state, step.error) == ("NODE_FAIL", f"infrastructure failure on {failed}: {LEADER_KILLED.reason}")
    assert job.state is JobState.RUNNING
    assert history_to_json(job.history[-1]) == {"t": T0 + 2, "event": "infrastructure-failed", "node": failed,
                                                "step": 0, "kind": "leader-killed", "reason": LEADER_KILLED.reason}


def test_an_agent_that_cannot_start_tasks_for_its_own_reason_has_its_node_drained_and_the_job_goes_elsewhere() -> None:
    engine = engine_with_nodes(count=2)
    job = engine.submit(spec(gpus=4), T0)
    engine.schedule(T0)
    (first,) = job.node_names
    other = "node2" if first == "node1" else "node1"
    spool = InfrastructureFailure("start-failed", "cannot record the launch in /var/spool/corral/launches: ENOSPC")
    engine.handle(ev.TasksFinished(first, job.id, ((0, 1, 0),), error=spool.reason, restart_count=0,
                                   infrastructure=spool), now=T0 + 1)
    assert (job.state, job.restart_count) == (JobState.PENDING, 1), "requeued, not FAILED"
    node = engine.nodes[first]
    assert (node.drain, node.drain_reason) == (True, f"cannot start tasks: {spool.reason}")
    assert engine.schedule(T0 + 2) == [Launch(job.id, other)], "not again where it cannot start"


def test_a_killed_leader_does_not_drain_its_node() -> None:
    engine = engine_with_nodes(count=1)
    job = engine.submit(spec(), T0)
    engine.schedule(T0)
    _infrastructure_failed(engine, "node1", job.id, T0 + 1)
    assert engine.nodes["node1"].drain is False


def test_a_run_whose_start_its_restarted_agent_reports_failed_is_requeued_as_a_new_run_not_sent_again() -> None:
    """The agent died while starting the run (decision 0015, "A start the agent did not finish"): its task
    may have started and been killed unconfirmed. The restarted agent registers with the job among its
    finished ones and reports the failure: the launch is not sent again (that would start run 0 twice), the
    job is requeued as run 1 with the reason."""
    engine = engine_with_nodes(count=1)
    job = engine.submit(spec(), T0)
    assert engine.schedule(T0) == [Launch(job.id, "node1")]
    interrupted = InfrastructureFailure("agent-error", "its agent stopped while starting its tasks here")
    unfinished_start = engine.register_node("node1", inventory(4), set(), {job.id}, T0 + 5)
    assert unfinished_start == ([], []), "no launch sent again, nothing to kill"
    assert engine.register_node("node1", inventory(4), set(), set(), T0 + 5)[1] == [Launch(job.id, "node1")], \
        "without the report, the same run's launch is sent again (what started run 0 twice)"
    _infrastructure_failed(engine, "node1", job.id, T0 + 6, interrupted)
    assert (job.state, job.restart_count) == (JobState.PENDING, 1)
    assert job.history[-1].cause == f"infrastructure failure on node1: {interrupted.reason}"
