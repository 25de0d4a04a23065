"""Job steps (srun) and allocations (salloc) in the engine: layout, launch, accounting, and how a job's
end takes its steps with it."""
from __future__ import annotations

import dataclasses
import re
import signal

import pytest

from corral.controller.step_views import step_launch_message
from corral.engine.commands import Kill, Launch, LaunchStep
from corral.engine.engine import WrongState
from corral.engine.records import JobState
from corral.engine.steps import JobNotRunning, StepRefused, StepRequest, layout
from tests.engine.builders import T0, engine_with_nodes, spec


def batch_job(engine, nodes=2, gpus=2, tasks=1, requeue=True):
    job = engine.submit(dataclasses.replace(spec(nodes=nodes, gpus=gpus, tasks=tasks), batch=True, requeue=requeue),
                        T0)
    commands = engine.schedule(T0)
    assert commands == [Launch(job.id, job.slices[0].node)], "the batch shell runs on the first node only"
    return job


def request(**kw) -> StepRequest:
    return StepRequest(name="hostname", launch={"argv": ["hostname"], "workdir": "/"}, **kw)


def test_step_layout_defaults_and_block_distribution() -> None:
    engine = engine_with_nodes(count=3)
    job = batch_job(engine, nodes=3)
    names = job.node_names
    assert layout(job, request()) == (names, (1, 1, 1))
    assert layout(job, request(ntasks=4)) == (names, (2, 1, 1)), "block: the first nodes take the extra"
    assert layout(job, request(ntasks=1)) == (names[:1], (1,))
    assert layout(job, request(nodelist=(names[2],))) == ((names[2],), (1,))
    assert layout(job, request(nodes=2, exclude=(names[0],))) == (names[1:], (1, 1))
    # Excluding a node the allocation lacks changes nothing (srun -x node9 outside a job excludes it from both
    # the job and its step; Slurm's srun runs such a step too).
    assert layout(job, request(exclude=("elsewhere",))) == (names, (1, 1, 1))
    assert layout(job, request(nodes=2, ntasks_per_node=2)) == (names[:2], (2, 2))
    with pytest.raises(StepRefused, match="not in the allocation"):
        layout(job, request(nodelist=("elsewhere",)))
    with pytest.raises(StepRefused, match="4 node"):
        layout(job, request(nodes=4))
    with pytest.raises(StepRefused, match="do not fit"):
        layout(job, request(nodes=1, ntasks=3, ntasks_per_node=2))
    with pytest.raises(StepRefused, match="GPU"):
        layout(job, request(nodes=1, ntasks=3, gpus_per_task=1))



def test_step_constraint_chooses_among_the_allocations_nodes() -> None:
    """srun --constraint inside a job: only the job's nodes whose features meet it (the engine's nodes say
    which); none of them, or a -w node that does not, is refused with Slurm's words and starts nothing."""
    engine = engine_with_nodes(count=3)
    job = batch_job(engine, nodes=3)
    first, second, third = job.node_names
    for name, features in ((first, {"ib", "nvme"}), (second, {"ib"}), (third, {"a100"})):
        engine.nodes[name].features = frozenset(features)
    step, commands = engine.start_step(job.id, request(constraint="nvme"), T0 + 1)
    assert (step.nodes, commands) == ((first,), [LaunchStep(job.id, 0, first)])
    step, _ = engine.start_step(job.id, request(constraint="ib"), T0 + 2)
    assert step.nodes == (first, second), "every allocated node that meets it, as without a constraint"
    step, _ = engine.start_step(job.id, request(constraint="nvme|a100", nodes=1, exclude=(first,)), T0 + 3)
    assert step.nodes == (third,)
    for refused, said in [
        (request(constraint="h100"), "no node of job 1's allocation meets --constraint=h100"),
        (request(constraint="ib&a100"), "meets --constraint=ib&a100"),
        (request(constraint="ib", nodelist=(third,)), f"{third} in --nodelist does not meet --constraint=ib"),
        (request(constraint="ib", nodes=3), "3 node(s) asked, 2 usable"),
        (request(constraint="(ib)"), "Invalid feature specification"),
    ]:
        with pytest.raises(StepRefused, match=re.escape(said)):
            engine.start_step(job.id, refused, T0 + 4)
    assert len(job.steps) == 3, "a refused step is not added"
    with pytest.raises(StepRefused, match=re.escape("Requested node configuration is not available: no node")):
        layout(job, request(constraint="nvme"))  # no features given: no node has any

def test_steps_launch_on_their_nodes_and_are_accounted() -> None:
    engine = engine_with_nodes()
    job = batch_job(engine)
    step, commands = engine.start_step(job.id, request(ntasks=2), T0 + 1)
    assert commands == [LaunchStep(job.id, 0, n) for n in job.node_names]
    second, _ = engine.start_step(job.id, request(nodelist=(job.node_names[1],)), T0 + 2)
    assert (step.step_id, second.step_id) == (0, 1), "concurrent steps get consecutive ids"
    engine.step_finished(job.node_names[0], job.id, 0, [(0, 0, 0)], None, T0 + 3)
    assert step.live, "a step ends when every node reported"
    engine.step_finished(job.node_names[1], job.id, 0, [(1, 3, 0)], None, T0 + 4)
    assert (step.state, step.exit_code, step.end_time) == ("FAILED", 3, T0 + 4)
    engine.step_finished(job.node_names[1], job.id, 0, [(1, 0, 0)], None, T0 + 5)
    assert step.exit_code == 3, "a repeated report changes nothing"
    engine.step_finished(job.node_names[1], job.id, 1, [(0, 0, 0)], None, T0 + 6)
    assert second.state == "COMPLETED"
    assert job.state is JobState.RUNNING, "steps ending do not end the job"


def test_a_step_whose_process_the_kernel_killed_for_memory_ends_out_of_memory() -> None:
    engine = engine_with_nodes()
    job = batch_job(engine)
    step, _ = engine.start_step(job.id, request(ntasks=2), T0 + 1)
    engine.step_finished(job.node_names[0], job.id, 0, [(0, 0, 0)], None, T0 + 2)
    engine.step_finished(job.node_names[1], job.id, 0, [(1, 0, signal.SIGKILL)], None, T0 + 3, oom_killed=True)
    assert (step.state, step.exit_code, step.signal) == ("OUT_OF_MEMORY", 0, 125), "Slurm's 0:125"
    assert job.state is JobState.RUNNING, "the batch script decides what happens next, as under Slurm"


def test_what_a_steps_nodes_sampled_stays_on_the_step() -> None:
    engine = engine_with_nodes()
    job = batch_job(engine)
    step, _ = engine.start_step(job.id, request(ntasks=2), T0 + 1)
    engine.step_finished(job.node_names[0], job.id, 0, [(0, 0, 0)], None, T0 + 2, usage={"samples": 1, "cpu_s": 2.5})
    engine.step_finished(job.node_names[1], job.id, 0, [(1, 0, 0)], None, T0 + 3, usage={"samples": 2, "cpu_s": 1.0})
    assert {node: run.usage["cpu_s"] for node, run in step.reported.items()} == {
        job.node_names[0]: 2.5, job.node_names[1]: 1.0}


def test_batch_end_kills_live_steps_and_waits_for_them() -> None:
    engine = engine_with_nodes()
    job = batch_job(engine)
    step, _ = engine.start_step(job.id, request(nodelist=(job.node_names[1],)), T0 + 1)
    commands = engine.node_finished(job.node_names[0], job.id, [(0, 0, 0)], None, T0 + 2)
    # slurmstepd tells the steps a plain cancel (SIG_TERM_KILL), as real Slurm does here.
    assert commands == [Kill(job.id, job.node_names[1], signal.SIGTERM, engine.config.kill_grace_s,
                             reason="cancelled")]
    assert job.state is JobState.COMPLETING and job.final_state is JobState.COMPLETED
    engine.step_finished(job.node_names[1], job.id, 0, [(0, 0, signal.SIGTERM)], None, T0 + 3)
    assert job.state is JobState.COMPLETED, "the batch shell's result decides the job's state"
    assert step.state == "CANCELLED" and step.signal == signal.SIGTERM


def test_cancel_reaches_step_nodes_and_scancel_signals_only_steps() -> None:
    engine = engine_with_nodes()
    job = batch_job(engine)
    engine.start_step(job.id, request(), T0 + 1)
    signals = engine.signal(job.id, signal.SIGUSR2, "steps", T0 + 2)
    assert sorted(signals, key=lambda k: k.node) == [
        Kill(job.id, n, signal.SIGUSR2, -1.0, target="steps") for n in job.node_names]
    kills = engine.cancel(job.id, T0 + 3)
    assert sorted(k.node for k in kills) == list(job.node_names), "the job's kill goes where steps run"


def test_warning_signal_goes_to_steps_unless_batch_flag() -> None:
    engine = engine_with_nodes(node_timeout_s=10_000)
    plain = engine.submit(dataclasses.replace(spec(limit_s=300), batch=True, warn_signal=signal.SIGUSR2,
                                              warn_before_s=90), T0)
    flagged = engine.submit(dataclasses.replace(spec(limit_s=300), batch=True, warn_signal=signal.SIGUSR1,
                                                warn_before_s=90, warn_batch=True), T0)
    engine.schedule(T0)
    engine.start_step(plain.id, request(), T0 + 1)
    commands = engine.tick(T0 + 210)
    assert Kill(plain.id, plain.node_names[0], signal.SIGUSR2, -1.0, target="steps") in commands
    assert Kill(flagged.id, flagged.node_names[0], signal.SIGUSR1, -1.0, target="batch") in commands
    assert len(commands) == 2


def test_allocation_runs_nothing_until_completed() -> None:
    engine = engine_with_nodes()
    job = engine.submit(dataclasses.replace(spec(nodes=2), argv=(), allocation=True), T0)
    assert engine.schedule(T0) == [], "an allocation launches nothing"
    assert job.state is JobState.RUNNING
    with pytest.raises(WrongState):
        engine.complete(batch_job(engine).id, 0, 0, T0)
    engine.start_step(job.id, request(), T0 + 1)
    kills = engine.complete(job.id, 2, 0, T0 + 5)
    assert sorted(k.node for k in kills) == list(job.node_names), "the holder's end kills live steps"
    for rank, node in enumerate(job.node_names):
        engine.step_finished(node, job.id, 0, [(rank, 0, signal.SIGTERM)], None, T0 + 6)
    assert (job.state, job.exit_code) == (JobState.FAILED, 2)


def test_allocation_timeout_without_steps_ends_at_once() -> None:
    engine = engine_with_nodes(node_timeout_s=10_000)
    job = engine.submit(dataclasses.replace(spec(limit_s=60), argv=(), allocation=True), T0)
    engine.schedule(T0)
    assert engine.tick(T0 + 60) == []
    assert job.state is JobState.TIMEOUT


def test_steps_refused_outside_a_running_job() -> None:
    engine = engine_with_nodes(count=1, gpus=1)
    engine.submit(spec(), T0)
    waiting = engine.submit(spec(), T0)
    engine.schedule(T0)
    with pytest.raises(JobNotRunning):
        engine.start_step(waiting.id, request(), T0 + 1)


def test_lost_node_fails_the_step_and_the_job() -> None:
    engine = engine_with_nodes()
    job = batch_job(engine, requeue=False)
    step, _ = engine.start_step(job.id, request(), T0 + 1)
    commands = engine.node_lost(job.node_names[1], T0 + 2)
    assert [k.node for k in commands] == [job.node_names[0]], "the rest of the gang is killed"
    assert job.final_state is JobState.NODE_FAIL
    engine.node_finished(job.node_names[0], job.id, [(0, 0, signal.SIGTERM)], None, T0 + 3)
    assert job.state is JobState.COMPLETING, "the step's first node has not reported yet"
    engine.step_finished(job.node_names[0], job.id, 0, [(0, 0, signal.SIGTERM)], None, T0 + 4)
    assert job.state is JobState.NODE_FAIL and step.state == "NODE_FAIL"


def test_begin_time_keeps_a_job_waiting_and_wakes_the_engine() -> None:
    engine = engine_with_nodes()
    job = engine.submit(dataclasses.replace(spec(), begin_time=T0 + 100), T0)
    assert engine.schedule(T0) == []
    assert job.reason == "BeginTime"
    assert engine.next_deadline(T0) <= T0 + 100
    assert [type(c) for c in engine.schedule(T0 + 100)] == [Launch]


def test_a_job_preempted_again_and_again_backs_off_before_restarting() -> None:
    engine = engine_with_nodes(count=1, node_timeout_s=10_000)
    victim = engine.submit(spec(), T0)
    waiting = engine.submit(spec(gpus=8), T0)  # never fits: the victim's GPU is all it would take
    now = T0
    delays = []
    for _ in range(4):
        engine.schedule(now)
        assert victim.state is JobState.RUNNING
        engine.life.preempt(victim.id, waiting.id, "reclaim", now)
        engine.node_finished(victim.node_names[0], victim.id, [(0, 0, signal.SIGTERM)], None, now + 2)
        assert victim.state is JobState.PENDING
        delays.append(None if victim.eligible_at is None else victim.eligible_at - (now + 2))
        engine.schedule(now + 3)
        if victim.eligible_at is not None:
            assert victim.state is JobState.PENDING and victim.reason == "BeginTime"
        now = (victim.eligible_at or now + 3) + 1
        engine.claims.clear()
    assert delays == [None, 10.0, 20.0, 40.0], "no wait after the first preemption, then doubling"


def test_a_steps_launch_message_carries_the_jobs_memory_per_node() -> None:
    """The agent limits a job's cgroup to it where a step, not the batch shell, is the job's first on a node."""
    engine = engine_with_nodes()
    two_nodes = spec(nodes=2, gpus=1)
    with_memory = dataclasses.replace(two_nodes.request, mem_per_node_mib=96)
    job = engine.submit(dataclasses.replace(two_nodes, batch=True, request=with_memory), T0)
    engine.schedule(T0)
    step, _ = engine.start_step(job.id, request(), T0 + 1)
    message = step_launch_message(job, step, job.node_names[1], engine.nodes, "corral")
    assert (message.mem_per_node_mib, message.cpus_on_node) == (96, job.slices[1].cpus)
