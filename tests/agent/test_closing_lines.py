"""slurmstepd's closing lines: their exact texts (Slurm 22.05's req.c, and the lines real Slurm wrote on
this machine), and the runners writing them once, on the first node, into the first task's stderr."""
from __future__ import annotations

import asyncio
import calendar
import signal
import sys
import time
import typing

import pytest

from corral import kill_reasons
from corral.agent.runner import JobRunner
from corral.agent.step_runner import StepRunner
from corral.protocol import SignalJob, TaskLaunch

from .test_step_runner import Srun, finish

WHEN = calendar.timegm((2026, 11, 24, 8, 14, 13, 0, 0, 0))


pytestmark = pytest.mark.usefixtures("utc")  # local times shown in UTC (tests/conftest.py)


@pytest.mark.parametrize(("reason", "entity", "line"), [
    # Recorded from real Slurm 22.05 here (`sbatch -t 1`, scancel, scontrol requeue; their prefix was
    # slurmstepd-node1 because that build runs several slurmd per host), less the node suffix.
    ("time-limit", "JOB 1004", "slurmstepd: error: *** JOB 1004 ON node1 CANCELLED AT 2026-11-24T08:14:13 "
                               "DUE TO TIME LIMIT ***\n"),
    ("cancelled", "JOB 1002", "slurmstepd: error: *** JOB 1002 ON node1 CANCELLED AT 2026-11-24T08:14:13 ***\n"),
    ("requeue", "JOB 5", "slurmstepd: error: *** JOB 5 ON node1 CANCELLED AT 2026-11-24T08:14:13 "
                         "DUE TO JOB REQUEUE ***\n"),
    ("cancelled", "STEP 4.0", "slurmstepd: error: *** STEP 4.0 ON node1 CANCELLED AT 2026-11-24T08:14:13 ***\n"),
    ("time-limit", "STEP 3.0", "slurmstepd: error: *** STEP 3.0 ON node1 CANCELLED AT 2026-11-24T08:14:13 "
                               "DUE TO TIME LIMIT ***\n"),
    ("failure", "STEP 9.0", "slurmstepd: error: *** STEP 9.0 ON node1 FAILED (non-zero exit code or other "
                            "failure mode) ***\n"),
    # From the source only (src/slurmd/slurmstepd/req.c):
    ("preemption", "JOB 7", "slurmstepd: error: *** JOB 7 ON node1 CANCELLED AT 2026-11-24T08:14:13 "
                            "DUE TO PREEMPTION ***\n"),
    ("node-failure", "JOB 7", "slurmstepd: error: *** JOB 7 ON node1 CANCELLED AT 2026-11-24T08:14:13 "
                              "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n"),
])
def test_texts(reason, entity, line):
    assert kill_reasons.closing_line(reason, entity, "node1", WHEN) == line


def test_time_is_local_and_entities_are_slurms():
    assert kill_reasons.job_entity(12) == "JOB 12" and kill_reasons.step_entity(12, 3) == "STEP 12.3"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(WHEN))
    assert f"CANCELLED AT {stamp} ***" in kill_reasons.closing_line("cancelled", "JOB 1", "n", WHEN)
    with pytest.raises(ValueError):
        kill_reasons.closing_line("bored", "JOB 1", "n", WHEN)


def test_the_protocol_carries_every_reason():
    annotation = SignalJob.model_fields["reason"].annotation
    (literal,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    assert set(typing.get_args(literal)) == set(kill_reasons.REASONS)


# A task that says when it started and when SIGTERM reached it (a shell would add "Terminated" lines).
TRAPPING = [sys.executable, "-c", """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (print("got TERM", file=sys.stderr, flush=True), sys.exit(0)))
print("started", flush=True)
open("ready", "w").close()
while True:
    time.sleep(0.05)
"""]


async def kill_when_ready(runner, workdir, *kills):
    """Run the job's tasks until `ready` exists, then each (signal, grace, reason) kill; the NodeFinished."""
    events = runner.run()
    await anext(events)
    deadline = time.monotonic() + 5
    while not (workdir / "ready").exists():
        assert time.monotonic() < deadline, "task never became ready"
        await asyncio.sleep(0.01)
    for signum, grace_s, reason, *note in kills:
        await runner.kill(signum, grace_s, reason, *note)
    return await anext(events)


def job_runner(launch, tmp_path, agent_env):
    return JobRunner(launch, node_name="n1", spool_dir=tmp_path / "spool", base_env=agent_env)


def test_batch_output_gets_the_line_before_the_signal_and_only_once(make_launch, tmp_path, agent_env):
    launch = make_launch(argv=TRAPPING, batch=True)
    before = time.time()
    asyncio.run(kill_when_ready(job_runner(launch, tmp_path, agent_env), tmp_path,
                                (signal.SIGTERM, 5.0, "time-limit"), (signal.SIGKILL, 0.0, "time-limit")))
    lines = (tmp_path / "slurm-7.out").read_text().splitlines()
    assert lines[0] == "started" and lines[2] == "got TERM" and len(lines) == 3, lines
    prefix = "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT "
    stamp = lines[1][len(prefix):len(prefix) + 19]
    assert lines[1] == f"{prefix}{stamp} DUE TO TIME LIMIT ***"
    assert before - 1 <= calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) <= time.time()


def test_a_policys_note_follows_the_closing_line_on_one_line(make_launch, tmp_path, agent_env):
    launch = make_launch(argv=TRAPPING, batch=True)
    note = "this session is stopped: idle for 0:10:\nkernels idle and GPU utilisation below 5%"
    asyncio.run(kill_when_ready(job_runner(launch, tmp_path, agent_env), tmp_path,
                                (signal.SIGTERM, 5.0, "cancelled", note), (signal.SIGKILL, 0.0, "cancelled", note)))
    lines = (tmp_path / "slurm-7.out").read_text().splitlines()
    assert lines[1].startswith("slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT "), lines
    assert lines[2:] == ["corral: this session is stopped: idle for 0:10: kernels idle and GPU utilisation below 5%",
                         "got TERM"]


def test_a_separate_error_file_gets_the_line(make_launch, tmp_path, agent_env):
    launch = make_launch(argv=TRAPPING, batch=True, error="err-%j.txt")
    asyncio.run(kill_when_ready(job_runner(launch, tmp_path, agent_env), tmp_path, (signal.SIGTERM, 5.0, "cancelled")))
    assert (tmp_path / "slurm-7.out").read_text() == "started\n"
    err = (tmp_path / "err-7.txt").read_text().splitlines()
    assert err[0].startswith("slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT ") and err[0].endswith(" ***")
    assert err[1:] == ["got TERM"]


@pytest.mark.parametrize(("overrides", "reason"), [
    ({"node_index": 1, "nodes": ["n0", "n1"]}, "cancelled"),  # the first node writes it, not this one
    ({}, None),  # a kill without a reason (srun gone, a stray job): no line
])
def test_no_line(make_launch, tmp_path, agent_env, overrides, reason):
    launch = make_launch(argv=TRAPPING, **overrides)
    asyncio.run(kill_when_ready(job_runner(launch, tmp_path, agent_env), tmp_path, (signal.SIGTERM, 5.0, reason)))
    assert (tmp_path / "slurm-7.out").read_text() == "started\ngot TERM\n"


def test_no_line_once_the_tasks_have_exited(make_launch, tmp_path, agent_env):
    runner = job_runner(make_launch(argv=["true"]), tmp_path, agent_env)

    async def scenario():
        [event async for event in runner.run()]
        await runner.kill(signal.SIGTERM, 1.0, "cancelled")

    asyncio.run(scenario())
    assert (tmp_path / "slurm-7.out").read_text() == ""


def test_a_step_tells_srun_as_its_first_tasks_stderr(make_step, tmp_path, agent_env):
    side = Srun(input="none")
    try:
        ready = tmp_path / "ready"
        launch = make_step(argv=["sh", "-c", f"echo out; touch {ready}; while :; do sleep 0.05; done"], step_id=2,
                           tasks=[TaskLaunch(rank=4, local_rank=0, gpus=[]), TaskLaunch(rank=5, local_rank=1, gpus=[])],
                           num_tasks=2, tasks_per_node=[2], **side.io_fields())

        async def scenario():
            side.streams.expect({"n1": [4, 5]})
            runner = StepRunner(launch, node_name="n1", spool_dir=tmp_path / "spool", base_env=agent_env)
            task = asyncio.create_task(finish(runner))
            while not ready.exists():
                await asyncio.sleep(0.02)
            await runner.kill(signal.SIGTERM, 5.0, "cancelled")
            await runner.kill(signal.SIGKILL, 0.0, "cancelled")
            return await asyncio.wait_for(task, 10)

        asyncio.run(scenario())
        assert side.streams.wait(5)
        (line,) = side.stderr.splitlines()
        assert line.startswith("slurmstepd: error: *** STEP 7.2 ON n1 CANCELLED AT ") and line.endswith(" ***")
    finally:
        side.streams.close()


def test_a_steps_error_file_gets_the_line(make_step, tmp_path, agent_env):
    ready = tmp_path / "ready"
    launch = make_step(argv=["sh", "-c", f"touch {ready}; while :; do sleep 0.05; done"], error="%j.%s.err")

    async def scenario():
        runner = StepRunner(launch, node_name="n1", spool_dir=tmp_path / "spool", base_env=agent_env)
        task = asyncio.create_task(finish(runner))
        while not ready.exists():
            await asyncio.sleep(0.02)
        await runner.kill(signal.SIGTERM, 5.0, "time-limit")
        return await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    (line,) = (tmp_path / "7.0.err").read_text().splitlines()
    assert line.startswith("slurmstepd: error: *** STEP 7.0 ON n1 CANCELLED AT ") and line.endswith(
        " DUE TO TIME LIMIT ***")
