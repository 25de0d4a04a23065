"""The agent's record of its live tasks (task_spool.py): what an agent started never outlives it unnoticed,
a restarted agent kills it before registering, and no GPU goes to two live jobs."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys

import psutil

from corral.agent.task_spool import TaskSpool, sweep
from corral.protocol import NodeStarted, SignalJob, StepFinished, TaskExit, TaskLaunch


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


def test_a_launch_onto_gpus_a_live_task_of_another_job_holds_is_refused(controller, run_with_agent, make_launch,
                                                                        make_step, tmp_path):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=7, node_gpus=[0], argv=["sleep", "30"]))
        await controller.until(lambda: controller.started(7))
        controller.send(make_launch(job_id=8, node_gpus=[1, 0], tasks=[TaskLaunch(rank=0, local_rank=0, gpus=[1, 0])],
                                    argv=["sh", "-c", "echo ran > job8"]))
        controller.send(make_step(job_id=9, node_gpus=[0], argv=["sh", "-c", "echo ran > step9"]))
        controller.send(make_launch(job_id=10, node_gpus=[1], argv=["true"]))  # a free GPU: fine
        await controller.until(lambda: controller.finished(8) and controller.finished(10) and
                               controller.events_of(StepFinished, 9))
        assert agent.running_jobs == [7], "the job holding the GPU runs on"
        controller.send(SignalJob(job_id=7, signal=signal.SIGKILL, grace_s=0))
        await controller.until(lambda: controller.finished(7))

    run_with_agent(scenario)
    refused = controller.finished(8)
    assert refused.error == ("GPU 0 of node n1 still in use by job 7, whose tasks there have not exited: "
                             "refusing to start another job on it")
    assert refused.tasks == [TaskExit(rank=0, exit_code=1)] and controller.started(8) is None
    (step,) = controller.events_of(StepFinished, 9)
    assert "GPU 0 of node n1 still in use by job 7" in step.error
    assert controller.finished(10).tasks == [TaskExit(rank=0, exit_code=0)]
    assert not (tmp_path / "job8").exists() and not (tmp_path / "step9").exists()


def test_tasks_are_recorded_while_they_run(controller, run_with_agent, make_launch, tmp_path):
    spool = TaskSpool(tmp_path / "spool")

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=5, node_gpus=[1], argv=["sleep", "30"]))
        (started,) = await controller.until(lambda: controller.events_of(NodeStarted, 5))
        (record,) = spool.records()
        assert (record.pgid, record.job_id, record.step_id, record.gpus) == (started.pids[0], 5, None, (1,))
        assert record.started == psutil.Process(started.pids[0]).create_time()
        controller.send(SignalJob(job_id=5, signal=signal.SIGTERM, grace_s=2))
        await controller.until(lambda: controller.finished(5))

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


def test_with_kill_tasks_on_exit_sigterm_stops_the_agent_and_its_tasks(controller, make_launch, tmp_path, is_dead):
    secret_file = tmp_path / "secret"
    secret_file.write_text("test-secret\n")
    agent = subprocess.Popen(
        [sys.executable, "-m", "corral.agent", "--controller", controller.url, "--secret-file", str(secret_file),
         "--node", "n1", "--gpus", "2", "--cpus", "2", "--mem-mib", "1024", "--spool", str(tmp_path / "spool"),
         "--kill-tasks-on-exit"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    task_pid = None
    try:
        controller.wait(lambda: controller.polls, timeout_s=10)
        controller.send(make_launch(job_id=31, argv=["sleep", "30"]))
        (started,) = controller.wait(lambda: controller.events_of(NodeStarted, 31))
        task_pid = started.pids[0]
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=10) == 0
        assert b"killed the tasks of job 31" in agent.stderr.read()
        assert is_dead(task_pid, within_s=0)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        agent.stderr.close()
        if task_pid is not None and not is_dead(task_pid, within_s=0):
            os.killpg(task_pid, signal.SIGKILL)
