"""A restarted agent adopts the tasks its SIGKILLed predecessor left running (decision 0015): it reports
them running when it registers, reports their real exit status when they end, can still kill them, and
reports lost only the work that truly died. Real agent processes against the fake controller."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from corral.agent.leaders import begin_task
from corral.agent.task_spool import TaskSpool
from corral.protocol import NodeStarted, SignalJob, StepFinished, TaskLaunch
from tests.agent.test_confinement import cgroup_tree as agent_cgroups  # noqa: F401 - a fixture: a cgroup2 tree
from tests.agent.test_confinement import gpu_files  # noqa: F401 - the fixture cgroup_tree uses


@pytest.fixture
def agents(controller, tmp_path) -> Iterator:
    """start() -> a real agent process for node n1 with the test's spool; all are gone afterwards."""
    started: list[subprocess.Popen[bytes]] = []
    secret_file = tmp_path / "secret"
    secret_file.write_text("test-secret\n")

    def start() -> subprocess.Popen[bytes]:
        log = open(tmp_path / "agent.log", "ab")
        agent = subprocess.Popen(
            [sys.executable, "-m", "corral.agent", "--controller", controller.url, "--secret-file", str(secret_file),
             "--node", "n1", "--gpus", "2", "--cpus", "2", "--mem-mib", "1024", "--spool", str(tmp_path / "spool"),
             "--tasks-as-agent-user", "--no-cgroups"], stdout=log, stderr=subprocess.STDOUT)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def sigkill(agent: subprocess.Popen[bytes]) -> None:
    agent.kill()
    agent.wait()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def registrations_since(controller, count: int):
    return controller.wait(lambda: controller.registrations[count:], timeout_s=15)


def start_job(controller, agents, make_launch, script: str, **fields):
    agent = agents()
    controller.wait(lambda: controller.polls, timeout_s=10)
    controller.send(make_launch(job_id=31, argv=["sh", "-c", script], **fields))
    (started,) = controller.wait(lambda: controller.events_of(NodeStarted, 31), timeout_s=10)
    return agent, started.pids[0]


def test_a_restarted_agent_adopts_a_running_task_and_reports_its_exit(controller, agents, make_launch, tmp_path):
    go = tmp_path / "go"
    script = f"echo before; while [ ! -e {go} ]; do sleep 0.05; done; echo after; exit 3"
    agent, task = start_job(controller, agents, make_launch, script, node_gpus=[1])
    sigkill(agent)
    assert alive(task), "a task outlives its SIGKILLed agent"

    seen = len(controller.registrations)
    agents()
    (registration,) = registrations_since(controller, seen)
    assert registration.running_jobs == [31], "the restarted agent reports the adopted job running"
    assert alive(task)
    go.touch()

    finished = controller.wait(lambda: controller.finished(31), timeout_s=10)
    assert [(t.rank, t.exit_code, t.signal) for t in finished.tasks] == [(0, 3, 0)]
    assert (tmp_path / "slurm-31.out").read_text() == "before\nafter\n", "the output file kept growing"
    assert len(controller.events_of(NodeStarted, 31)) == 1, "an adopted job is not started again"
    # Once the controller has the job's end, the spool forgets it.
    controller.wait(lambda: TaskSpool(tmp_path / "spool").records() == [], timeout_s=5)
    assert not list((tmp_path / "spool" / "launches").glob("*.json"))
    assert not list((tmp_path / "spool" / "tasks").glob("*.exit"))


def test_an_adopted_task_can_still_be_killed(controller, agents, make_launch, tmp_path):
    agent, task = start_job(controller, agents, make_launch, "sleep 30 & wait")
    sigkill(agent)
    seen = len(controller.registrations)
    agents()
    (registration,) = registrations_since(controller, seen)
    assert registration.running_jobs == [31]
    controller.send(SignalJob(job_id=31, signal=signal.SIGTERM, grace_s=2, reason="cancelled"))

    finished = controller.wait(lambda: controller.finished(31), timeout_s=10)
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(0, signal.SIGTERM)]
    assert not alive(task)
    assert len(controller.events_of(NodeStarted, 31)) == 1, "the re-sent launch was not run again"
    assert "CANCELLED" in (tmp_path / "slurm-31.out").read_text(), "slurmstepd's closing line, as before"


def test_a_task_that_ended_while_no_agent_watched_is_reported_with_its_exit(controller, agents, make_launch,
                                                                            tmp_path):
    go = tmp_path / "go"
    agent, task = start_job(controller, agents, make_launch, f"while [ ! -e {go} ]; do sleep 0.05; done; exit 5")
    sigkill(agent)
    go.touch()
    deadline = time.monotonic() + 5
    while alive(task) and time.monotonic() < deadline:
        time.sleep(0.05)

    seen = len(controller.registrations)
    agents()
    (registration,) = registrations_since(controller, seen)
    assert 31 in registration.running_jobs + registration.finished_jobs
    finished = controller.wait(lambda: controller.finished(31), timeout_s=10)
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(5, 0)]
    assert len(controller.events_of(NodeStarted, 31)) == 1, "the re-sent launch was not run again"


def test_an_end_the_controller_never_got_is_reported_by_the_next_agent(controller, agents, make_launch, tmp_path):
    go = tmp_path / "go"
    agent, task = start_job(controller, agents, make_launch, f"while [ ! -e {go} ]; do sleep 0.05; done; exit 6")
    controller.stop()  # the controller is away when the task ends: its NodeFinished stays in the agent's outbox
    go.touch()
    deadline = time.monotonic() + 5
    while alive(task) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # the agent reaped it and holds its end
    sigkill(agent)
    controller.start()

    seen = len(controller.registrations)
    agents()
    (registration,) = registrations_since(controller, seen)
    assert 31 in registration.running_jobs + registration.finished_jobs
    finished = controller.wait(lambda: controller.finished(31), timeout_s=10)
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(6, 0)]
    controller.wait(lambda: TaskSpool(tmp_path / "spool").records() == [], timeout_s=5)


def test_a_task_whose_leader_was_killed_is_lost_and_reported_as_an_infrastructure_failure(controller, agents,
                                                                                          make_launch, tmp_path):
    agent, task = start_job(controller, agents, make_launch, "sleep 30")
    (record,) = TaskSpool(tmp_path / "spool").records()
    sigkill(agent)
    os.kill(record.leader, signal.SIGKILL)  # nobody is left to record the task's end: it dies with its leader
    deadline = time.monotonic() + 5
    while alive(task) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(task)

    seen = len(controller.registrations)
    agents()
    (registration,) = registrations_since(controller, seen)
    assert registration.running_jobs == [] and registration.finished_jobs == [31], "its end, not its own"
    # The lost task's record is gone (the controller may already have started the job again: another record).
    assert record.pgid not in [r.pgid for r in TaskSpool(tmp_path / "spool").records()]
    finished = controller.wait(lambda: controller.finished(31), timeout_s=10)
    assert finished.infrastructure is not None and finished.infrastructure.kind == "leader-killed"
    assert finished.infrastructure.reason == \
        "the leader of task 0 died without recording its end, while no agent watched it"
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(0, signal.SIGKILL)]
    assert "cannot adopt job 31: the leader of task 0 died without recording its end" in \
        (tmp_path / "agent.log").read_text()


def test_a_restarted_agent_adopts_a_step_and_reports_its_end(controller, agents, make_step, tmp_path):
    agent = agents()
    controller.wait(lambda: controller.polls, timeout_s=10)
    go = tmp_path / "go"
    tasks = [TaskLaunch(rank=rank, local_rank=rank, gpus=[]) for rank in (0, 1)]
    controller.send(make_step(argv=["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 4"],
                              output=str(tmp_path / "step.out"), tasks=tasks, tasks_per_node=[2], num_tasks=2))
    spool = TaskSpool(tmp_path / "spool")
    controller.wait(lambda: len(spool.records()) == 2, timeout_s=10)
    sigkill(agent)

    seen = len(controller.registrations)
    agents()
    (registration,) = registrations_since(controller, seen)
    assert registration.running_steps == [(7, 0)]
    go.touch()
    (finished,) = controller.wait(lambda: [e for e in controller.events if isinstance(e, StepFinished)], timeout_s=10)
    assert [(t.rank, t.exit_code) for t in finished.tasks] == [(0, 4), (1, 4)] and finished.error is None


def test_a_job_the_controller_disowns_is_gone_before_the_agent_takes_a_command(controller, run_with_agent,
                                                                               make_launch, tmp_path):
    # A controller that failed job 31 while the node was silent disowns it when the agent registers again;
    # it may already have given job 31's GPU to job 32.
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=31, node_gpus=[0], argv=["sh", "-c", "trap '' TERM; sleep 30"]))
        await controller.until(lambda: controller.started(31))
        controller.kill_jobs = [31]
        controller.restart("epoch-2")
        controller.send(make_launch(job_id=32, node_gpus=[0], argv=["true"]))
        finished = await controller.until(lambda: controller.finished(32), timeout_s=15)
        assert finished.error is None, "job 32 started once job 31's tasks were gone"
        assert controller.started(32) and controller.finished(31)

    run_with_agent(scenario)


def test_an_adopted_jobs_cgroup_is_kept_and_a_leftover_one_killed(controller, request, make_launch, tmp_path):
    cgroup_tree = request.getfixturevalue("agent_cgroups")
    secret_file = tmp_path / "secret"
    secret_file.write_text("test-secret\n")
    argv = [sys.executable, "-m", "corral.agent", "--controller", controller.url, "--secret-file", str(secret_file),
            "--node", "n1", "--gpus", "2", "--cpus", "2", "--mem-mib", "1024", "--spool", str(tmp_path / "spool"),
            "--tasks-as-agent-user", "--cgroup-root", str(cgroup_tree.root)]
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    second = None
    leftover = subprocess.Popen(["sleep", "300"])
    try:
        controller.wait(lambda: controller.polls, timeout_s=10)
        go = tmp_path / "go"
        script = (f"setsid sh -c 'echo $$ > {tmp_path}/escaped; exec sleep 300' </dev/null >/dev/null 2>&1 & "
                  f"while [ ! -e {go} ]; do sleep 0.05; done")
        controller.send(make_launch(job_id=31, argv=["sh", "-c", script]))
        controller.wait(lambda: controller.events_of(NodeStarted, 31) and (tmp_path / "escaped").exists())
        escaped = int((tmp_path / "escaped").read_text())
        sigkill(first)
        stray = cgroup_tree.root / "job_99" / "batch"  # a job the spool does not know
        stray.mkdir(parents=True)
        (stray / "cgroup.procs").write_text(str(leftover.pid))

        seen = len(controller.registrations)
        second = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (registration,) = registrations_since(controller, seen)
        assert registration.running_jobs == [31]
        assert leftover.wait(timeout=5) == -signal.SIGKILL, "what no record names is killed"
        assert alive(escaped), "the adopted job's cgroup is left alone"
        go.touch()
        finished = controller.wait(lambda: controller.finished(31), timeout_s=10)
        assert [(t.exit_code, t.signal) for t in finished.tasks] == [(0, 0)]
        deadline = time.monotonic() + 3
        while alive(escaped) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(escaped), "what the job left in its cgroup dies with it, as before"
    finally:
        for proc in (first, second, leftover):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        for job in cgroup_tree.root.glob("job_*"):  # whatever a failed run left
            (job / "cgroup.kill").write_text("1")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a task as another user")
def test_a_task_run_as_its_user_dies_with_its_leader(tmp_path):
    # The parent-death signal is set after the change of user (which would clear it).
    starting = begin_task(["sleep", "30"], cwd="/", env={"PATH": os.environ["PATH"]}, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, user=(65534, 65534, []),
                          exit_dir=tmp_path)
    task = asyncio.run(starting.result())
    task.confirm(recorded=True)
    assert psutil.Process(task.pid).uids().real == 65534
    os.kill(task.leader_pid, signal.SIGKILL)
    deadline = time.monotonic() + 3
    while alive(task.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(task.pid)


def test_a_task_the_agent_never_recorded_does_not_run_on(tmp_path):
    # The agent died (or could not write the spool) between learning the task's pid and recording it.
    starting = begin_task(["sleep", "30"], cwd="/", env={"PATH": os.environ["PATH"]}, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, user=None, exit_dir=tmp_path)
    task = asyncio.run(starting.result())
    assert alive(task.pid)
    task.confirm(recorded=False)
    assert asyncio.run(task.wait()) == -signal.SIGKILL
    assert not alive(task.pid)
