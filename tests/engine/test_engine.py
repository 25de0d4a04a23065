"""The engine folding stimuli into job records and commands, with time as an input."""
from __future__ import annotations

import dataclasses
import signal

from corral.engine import events as ev
from corral.engine.commands import Kill, Launch
from corral.engine.history import RanAsAgentUser, history_to_json
from corral.engine.records import JobState
from tests.engine.builders import T0, engine_with_nodes, inventory, spec


def test_gang_start_launches_on_every_node_then_completes() -> None:
    engine = engine_with_nodes()
    job = engine.submit(spec(nodes=2, gpus=2, tasks=2), T0)
    commands = engine.schedule(T0 + 1)
    assert sorted(c.node for c in commands if isinstance(c, Launch)) == ["node1", "node2"]
    assert job.state is JobState.RUNNING and job.start_time == T0 + 1
    for n in ("node1", "node2"):
        engine.node_started(n, job.id, T0 + 2)
    engine.node_finished("node1", job.id, [(0, 0, 0), (1, 0, 0)], None, T0 + 11)
    assert job.state is JobState.RUNNING, "the job runs until every node reports"
    engine.node_finished("node2", job.id, [(2, 0, 0), (3, 0, 0)], None, T0 + 21)
    assert job.state is JobState.COMPLETED and job.end_time == T0 + 21
    assert job.gpu_seconds == 4 * 20
    assert job.id not in engine.jobs, "finished jobs leave memory"
    dirty, _ = engine.take_dirty()
    assert job in dirty, "the final record goes to the store"


def test_what_each_node_sampled_stays_on_the_job_record_for_sacct() -> None:
    engine = engine_with_nodes()
    job = engine.submit(spec(nodes=2), T0)
    engine.schedule(T0)
    engine.node_finished("node1", job.id, [(0, 0, 0)], None, T0 + 5, usage={"samples": 3, "max_rss_kib": 1104})
    engine.node_finished("node2", job.id, [(1, 0, 0)], None, T0 + 6)
    assert job.state is JobState.COMPLETED
    assert job.runs["node1"].usage == {"samples": 3, "max_rss_kib": 1104}
    assert job.runs["node2"].usage is None  # ended before its first sample


def test_a_cancel_by_a_policy_says_why_in_the_history() -> None:
    engine = engine_with_nodes()
    job = engine.submit(spec(), T0)
    engine.schedule(T0)
    engine.handle(ev.CancelRequested(job.id, None, reason="gpu-idle"), now=T0 + 5)
    assert job.state is JobState.COMPLETING and job.final_state is JobState.CANCELLED
    assert history_to_json(job.history[-1]) == {"t": T0 + 5, "event": "cancelled", "uid": None, "reason": "gpu-idle"}


def test_a_cancel_with_a_note_sends_it_to_the_nodes_for_the_log_once() -> None:
    engine = engine_with_nodes()
    job = engine.submit(spec(), T0)
    engine.schedule(T0)
    why = "idle for 0:10: kernels idle and GPU utilisation below 5%"
    kills = engine.handle(ev.CancelRequested(job.id, None, reason=why, note=f"stopped: {why}"), now=T0 + 5).commands
    assert [(k.signal, k.reason, k.note) for k in kills if isinstance(k, Kill)] == [
        (signal.SIGTERM, "cancelled", f"stopped: {why}")]
    assert history_to_json(job.history[-1])["reason"] == why
    resent = engine.handle(ev.TimePassed(), now=job.kill_deadline + 1).commands  # SIGKILL again: no second note
    assert [k.note for k in resent if isinstance(k, Kill)] == [None]


def test_nonzero_exit_fails_the_job_with_its_code() -> None:
    engine = engine_with_nodes()
    job = engine.submit(spec(), T0)
    engine.schedule(T0)
    engine.node_finished(job.slices[0].node, job.id, [(0, 3, 0)], None, T0 + 5)
    assert (job.state, job.exit_code, job.exit_signal) == (JobState.FAILED, 3, 0)


def test_a_job_whose_process_the_kernel_killed_for_memory_ends_out_of_memory() -> None:
    engine = engine_with_nodes()
    job = engine.submit(spec(nodes=2), T0)
    engine.schedule(T0)
    engine.node_finished("node1", job.id, [(0, 0, 0)], None, T0 + 5)
    engine.node_finished("node2", job.id, [(1, 0, signal.SIGKILL)], None, T0 + 5, oom_killed=True)
    assert (job.state, job.exit_code, job.exit_signal) == (JobState.OUT_OF_MEMORY, 0, 125), "Slurm's 0:125"


def test_the_job_record_notes_tasks_run_by_a_development_mode_agent_as_itself() -> None:
    engine = engine_with_nodes(count=1)
    engine.register_node("node2", dataclasses.replace(inventory(), run_as_user=False, agent_user="bob"), set(), set(),
                         T0)
    here, there = engine.submit(spec(gpus=4), T0), engine.submit(spec(gpus=4), T0)  # one node each
    engine.schedule(T0)
    assert {here.slices[0].node, there.slices[0].node} == {"node1", "node2"}
    for job in (here, there):
        engine.node_started(job.slices[0].node, job.id, T0 + 1)
    dev = here if here.slices[0].node == "node2" else there
    other = there if dev is here else here
    assert dev.history == [RanAsAgentUser(T0 + 1, "node2", "bob")]
    assert other.history == []


def test_cancel_pending_and_running() -> None:
    engine = engine_with_nodes(count=1, gpus=1)
    first, second = engine.submit(spec(), T0), engine.submit(spec(), T0)
    engine.schedule(T0)
    assert engine.cancel(second.id, T0 + 1) == []
    assert second.state is JobState.CANCELLED
    kills = engine.cancel(first.id, T0 + 2)
    assert kills == [Kill(first.id, "node1", signal.SIGTERM, engine.config.kill_grace_s, reason="cancelled")]
    assert first.state is JobState.COMPLETING
    engine.node_finished("node1", first.id, [(0, 0, signal.SIGTERM)], None, T0 + 3)
    assert first.state is JobState.CANCELLED


def test_time_limit_kills_then_times_out() -> None:
    engine = engine_with_nodes(count=1, node_timeout_s=1000)
    job = engine.submit(spec(limit_s=60), T0)
    engine.schedule(T0)
    assert engine.next_deadline() == T0 + 60
    assert engine.tick(T0 + 59) == []
    kills = engine.tick(T0 + 60)
    assert kills == [Kill(job.id, "node1", signal.SIGTERM, engine.config.kill_grace_s, reason="time-limit")]
    assert job.state is JobState.COMPLETING
    # The agent does not answer: SIGKILL is sent again after grace + report timeout.
    later = engine.tick(T0 + 60 + engine.config.kill_grace_s + engine.config.kill_report_timeout_s)
    assert later == [Kill(job.id, "node1", signal.SIGKILL, 0.0, reason="time-limit")]
    engine.node_finished("node1", job.id, [(0, 0, 9)], None, T0 + 95)
    assert job.state is JobState.TIMEOUT


def test_silent_node_fails_its_gangs_and_kills_the_rest() -> None:
    engine = engine_with_nodes()
    job = engine.submit(dataclasses.replace(spec(nodes=2), requeue=False), T0)
    engine.schedule(T0)
    engine.contact("node2", T0 + 40)
    commands = engine.tick(T0 + engine.config.node_timeout_s + 1)
    assert engine.nodes["node1"].up is False
    assert commands == [Kill(job.id, "node2", signal.SIGTERM, engine.config.kill_grace_s, reason="node-failure")]
    engine.node_finished("node2", job.id, [(1, 0, 15)], None, T0 + 45)
    assert job.state is JobState.NODE_FAIL


def test_reregistration_reconciles() -> None:
    engine = engine_with_nodes(count=1)
    started = engine.submit(dataclasses.replace(spec(), requeue=False), T0)
    unacked = engine.submit(spec(), T0)
    engine.schedule(T0)
    engine.node_started("node1", started.id, T0 + 1)
    # The agent restarted: it knows neither job, and runs a stray job 999.
    kill, commands = engine.register_node("node1", inventory(), {999}, set(), T0 + 5)
    assert kill == [999]
    assert Launch(unacked.id, "node1") in commands, "a launch never acknowledged is re-sent"
    assert started.state is JobState.NODE_FAIL, "a started --no-requeue job the agent lost cannot be recovered"


def test_registration_keeps_jobs_the_agent_still_runs() -> None:
    engine = engine_with_nodes(count=1)
    job = engine.submit(spec(), T0)
    engine.schedule(T0)
    engine.node_started("node1", job.id, T0 + 1)
    kill, commands = engine.register_node("node1", inventory(), {job.id}, set(), T0 + 5)
    assert (kill, commands, job.state) == ([], [], JobState.RUNNING)


def test_drained_node_gets_no_new_work() -> None:
    engine = engine_with_nodes(count=1)
    engine.set_drain("node1", True, "maintenance")
    job = engine.submit(spec(), T0)
    assert engine.schedule(T0) == []
    assert job.reason == "ReqNodeNotAvail"
    engine.set_drain("node1", False)
    assert engine.schedule(T0 + 1) == [Launch(job.id, "node1")]


def test_launch_failure_on_one_node_ends_the_gang() -> None:
    engine = engine_with_nodes()
    job = engine.submit(spec(nodes=2), T0)
    engine.schedule(T0)
    commands = engine.node_finished("node1", job.id, [], "workdir /nope does not exist", T0 + 1)
    assert commands == [Kill(job.id, "node2", signal.SIGTERM, engine.config.kill_grace_s, reason="failure")]
    engine.node_finished("node2", job.id, [(1, 0, 15)], None, T0 + 2)
    assert job.state is JobState.FAILED and "workdir" in job.reason


def test_a_job_starts_no_sooner_than_the_start_delay_after_submission() -> None:
    engine = engine_with_nodes(count=1, start_delay_s=0.3)
    job = engine.submit(spec(), T0)
    assert engine.schedule(T0 + 0.1) == [], "the submitter must have the id before the job runs"
    assert engine.next_deadline() == T0 + 0.3
    assert engine.schedule(T0 + 0.3) == [Launch(job.id, "node1")]


def test_a_submission_wants_a_cycle_only_when_one_now_would_act_for_its_jobs() -> None:
    delayed = engine_with_nodes(count=1, start_delay_s=0.3)
    plain = delayed.submit(spec(), T0)
    assert not delayed.cycle_wanted_for_submitted([plain]), "too fresh to start: the timer's cycle is the first"
    waiting = delayed.submit(dataclasses.replace(spec(), dependency=f"afterok:{plain.id}"), T0)
    assert delayed.cycle_wanted_for_submitted([plain, waiting]), "a cycle gives it its reason (Dependency) now"
    undelayed = engine_with_nodes(count=1)
    assert undelayed.cycle_wanted_for_submitted([undelayed.submit(spec(), T0)]), "it may start at once"


def test_an_open_reservation_is_no_deadline_but_its_end_is() -> None:
    from corral.api.tenancy import ReservationSpec

    engine = engine_with_nodes(count=1, node_timeout_s=1e9)
    engine.add_reservation(ReservationSpec(name="r", start=T0 - 10, end=T0 + 100, nodes="node1"), T0)
    assert engine.next_deadline(T0) == T0 + 100, "a past opening would wake the controller in a loop"
