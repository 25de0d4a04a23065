"""An agent killed while it starts a job's tasks (decision 0015): it saved the launch, and a task may have
started, run a little and been killed unconfirmed by its leader, but no task was recorded (or not every
one). The restarted agent reports that run as a failed launch (an infrastructure failure), so the
controller requeues the job as a new run instead of sending the same launch again and starting the run
twice (the fault suite's `twice` violation, docs/results.md). Real agent processes against the fake
controller; the agent is stopped at that point by stopping its leader factory, so no timing decides it."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest

from corral.agent.adoption import INTERRUPTED_START
from corral.agent.leaders import begin_task
from corral.agent.task_spool import TaskSpool
from corral.protocol import NodeFinished, NodeStarted, TaskLaunch
from tests.agent.test_adoption import agents, registrations_since, sigkill  # noqa: F401 - agents is a fixture


def leader_factory_of(agent: subprocess.Popen[bytes]) -> psutil.Process:
    (factory,) = [p for p in psutil.Process(agent.pid).children() if "--factory" in p.cmdline()]
    return factory


def saved_launches(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "spool" / "launches").glob("*.json"))


@pytest.fixture
def agent_killed_mid_start(controller, agents, make_launch, tmp_path):  # noqa: F811 - the imported fixture
    """An agent SIGKILLed after it saved job 31's launch and before it recorded its task: its leader factory
    was stopped, so the agent waits there for the leader's reply. Returns the job's launch."""
    agent = agents()
    controller.wait(lambda: controller.polls, timeout_s=10)
    controller.send(make_launch(job_id=30))  # a first task starts the agent's leader factory
    controller.wait(lambda: controller.finished(30), timeout_s=10)
    controller.wait(lambda: not saved_launches(tmp_path) and not TaskSpool(tmp_path / "spool").records(),
                    timeout_s=10)  # the controller has its end: the spool forgot it
    factory = leader_factory_of(agent)
    factory.suspend()
    try:
        launch = make_launch(job_id=31, argv=["sh", "-c", f"echo started >> {tmp_path}/starts"])
        controller.send(launch)
        controller.wait(lambda: saved_launches(tmp_path), timeout_s=10)
        assert TaskSpool(tmp_path / "spool").records() == [] and not controller.started(31)
        sigkill(agent)
    finally:
        factory.resume()  # it exits: its socket to the agent is closed
    factory.wait(10)
    return launch


def test_a_job_whose_start_its_agent_did_not_finish_is_reported_as_a_failed_launch(
        controller, agents, agent_killed_mid_start, tmp_path):  # noqa: F811
    seen = len(controller.registrations)
    agents()
    (registration,) = registrations_since(controller, seen)
    assert registration.running_jobs == [] and registration.finished_jobs == [31], \
        "its end, so the controller does not send the launch again"
    finished = controller.wait(lambda: controller.finished(31), timeout_s=10)
    assert finished.infrastructure is not None and finished.infrastructure.kind == "agent-error"
    assert finished.infrastructure.reason == INTERRUPTED_START
    assert [(t.rank, t.exit_code, t.signal) for t in finished.tasks] == [(0, 0, signal.SIGKILL)]
    assert finished.restart_count == agent_killed_mid_start.restart_count
    # The fake controller hands a new agent every command again: job 30's launch (run again: a new life
    # does not know it), then job 31's, which the agent ignores, having reported that run ended.
    controller.wait(lambda: len(controller.events_of(NodeFinished, 30)) == 2, timeout_s=10)
    controller.wait(lambda: controller.polls[-1][0] >= 2, timeout_s=10)
    time.sleep(0.5)
    assert not controller.events_of(NodeStarted, 31) and not (tmp_path / "starts").exists(), \
        "the run is not started again"
    assert "31.json" not in saved_launches(tmp_path), "nothing of it is left to report again"
    assert f"cannot adopt job 31: {INTERRUPTED_START}" in (tmp_path / "agent.log").read_text()


def test_a_job_of_which_only_some_tasks_were_recorded_is_reported_as_a_failed_launch(
        controller, agents, make_launch, tmp_path):  # noqa: F811
    """Two tasks: the first started and recorded, the agent killed before the second was recorded. The
    first is killed (it cannot be adopted alone) and the run is reported as a failed launch."""
    spool = TaskSpool(tmp_path / "spool")
    spool.directory.mkdir(parents=True)
    launch = make_launch(job_id=31, num_tasks=2, tasks_per_node=2,
                         tasks=[TaskLaunch(rank=0, local_rank=0, gpus=[]), TaskLaunch(rank=1, local_rank=1, gpus=[])])
    spool.save_launch(31, None, launch.model_dump_json())
    starting = begin_task(["sleep", "30"], cwd="/", env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "31"},
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, user=None,
                          exit_dir=spool.directory)
    import asyncio

    task = asyncio.run(starting.result())
    spool.add(task.pid, 31, None, [], rank=0, leader_pid=task.leader_pid, leader_started=task.leader_started)
    task.confirm(recorded=True)
    seen = len(controller.registrations)
    agents()
    (registration,) = registrations_since(controller, seen)
    assert registration.running_jobs == [] and registration.finished_jobs == [31]
    finished: NodeFinished = controller.wait(lambda: controller.finished(31), timeout_s=10)
    assert finished.infrastructure is not None and finished.infrastructure.reason == INTERRUPTED_START
    assert [(t.rank, t.signal) for t in finished.tasks] == [(0, signal.SIGKILL), (1, signal.SIGKILL)]
    deadline = time.monotonic() + 10
    while psutil.pid_exists(task.pid) and psutil.Process(task.pid).status() != psutil.STATUS_ZOMBIE \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not psutil.pid_exists(task.pid) or psutil.Process(task.pid).status() == psutil.STATUS_ZOMBIE, \
        "the recorded task does not run on"
