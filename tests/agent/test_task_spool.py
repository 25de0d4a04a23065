"""The agent's record of its live tasks (task_spool.py): what an agent started never outlives it unnoticed,
a restarted agent kills it before registering, and no GPU goes to two live jobs."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess

import psutil
import pytest

from corral.agent.task_spool import TaskSpool, since_boot, sweep
from corral.protocol import NodeStarted, SignalJob


def spawn_group(tmp_path, job_id: int, script: str = "sleep 30") -> subprocess.Popen:
    """A task as the agent starts one: its own session, the job's id in its environment."""
    return subprocess.Popen(["sh", "-c", script], cwd=tmp_path, start_new_session=True,
                            env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": str(job_id)})


def session_members(sid: int) -> list[int]:
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (psutil.Error, OSError):
            pass
    return found


def test_tasks_are_recorded_while_they_run(controller, run_with_agent, make_launch, tmp_path):
    spool = TaskSpool(tmp_path / "spool")

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=5, node_gpus=[1], argv=["sleep", "30"]))
        (started,) = await controller.until(lambda: controller.events_of(NodeStarted, 5))
        (record,) = spool.records()
        assert (record.pgid, record.job_id, record.step_id, record.gpus) == (started.pids[0], 5, None, (1,))
        assert record.started == pytest.approx(since_boot(psutil.Process(started.pids[0])), abs=0.001)
        controller.send(SignalJob(job_id=5, signal=signal.SIGTERM, grace_s=2))
        await controller.until(lambda: controller.finished(5))
        await controller.until(lambda: spool.records() == [])  # once the controller has the task's end

    run_with_agent(scenario)
    assert spool.records() == [], "a reaped task is forgotten"


def test_a_restarted_agent_kills_the_recorded_tasks_before_it_registers(controller, run_with_agent, tmp_path):
    leftover = spawn_group(tmp_path, job_id=3)
    TaskSpool(tmp_path / "spool").add(leftover.pid, 3, None, [0, 1])
    alive_at_registration = []
    controller.on_register = lambda registration: alive_at_registration.append(session_members(leftover.pid))

    async def scenario(agent):
        await controller.until(lambda: controller.polls)

    run_with_agent(scenario)
    assert alive_at_registration == [[]]
    assert leftover.wait(timeout=1) == -signal.SIGTERM
    assert TaskSpool(tmp_path / "spool").records() == []


def test_a_recorded_pid_that_now_belongs_to_another_process_is_left_alone(tmp_path):
    stranger = spawn_group(tmp_path, job_id=3)
    try:
        spool = TaskSpool(tmp_path / "spool")
        record = spool.add(stranger.pid, 3, None, [0])
        # What a reused pid looks like: the same number, a later start than the recorded task's.
        spool.write(dataclasses.replace(record, started=record.started - 60))
        killed, survivors = sweep(spool, grace_s=1)
        assert (killed, survivors) == ([], [])
        assert stranger.poll() is None, "a process that merely reuses the pid is never killed"
        assert spool.records() == []
    finally:
        stranger.kill()
        stranger.wait()


def test_a_record_from_an_earlier_boot_is_left_alone(tmp_path):
    task = spawn_group(tmp_path, job_id=3)
    try:
        spool = TaskSpool(tmp_path / "spool")
        spool.write(dataclasses.replace(spool.add(task.pid, 3, None, [0]), boot_id="an-earlier-boot"))
        assert sweep(spool, grace_s=1) == ([], [])
        assert task.poll() is None and spool.records() == []
    finally:
        task.kill()
        task.wait()


def test_what_a_dead_task_leader_left_in_its_session_is_killed(tmp_path):
    # The leader exits (and is reaped) while the agent is away; its background child runs on.
    leader = spawn_group(tmp_path, job_id=4, script="sleep 30 & echo $! > child; exit 0")
    spool = TaskSpool(tmp_path / "spool")
    spool.add(leader.pid, 4, None, [2])
    leader.wait()
    child = int((tmp_path / "child").read_text())
    assert session_members(leader.pid) == [child]

    killed, survivors = sweep(spool, grace_s=1)

    assert [r.pgid for r in killed] == [leader.pid] and survivors == []
    assert session_members(leader.pid) == []


def test_with_kill_tasks_on_exit_sigterm_stops_the_agent_and_its_tasks(agent_process_with_a_task, is_dead):
    with agent_process_with_a_task("--kill-tasks-on-exit") as (agent, task_pid):
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=10) == 0
        assert b"killed the tasks of job 31" in agent.stderr.read()
        assert is_dead(task_pid, within_s=0)
