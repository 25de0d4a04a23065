"""When corral's own machinery fails under a job's tasks, the agent says so on NodeFinished (`infrastructure`),
never as the tasks' own exit: a task leader killed from outside (the task dies with it), the job's cgroup
removed under it (another cluster's agent sweeping a cgroup of the same name kills everything in it, then
removes it). A task killed from outside while its leader lives is the task's own end, as before."""
from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from corral.agent.cgroup_hierarchies import Unified
from corral.agent.runner import JobRunner
from corral.agent.task_spool import TaskSpool
from corral.agent.tasks import DEVELOPMENT_MODE, Confinement
from corral.protocol import NodeFinished, NodeStarted, TaskLaunch
from tests.agent.test_confinement import cgroup_tree, gpu_files, shared_dir  # noqa: F401 - fixtures


def run_and_interfere(launch, spool: Path, agent_env, interfere, confinement: Confinement = DEVELOPMENT_MODE
                      ) -> NodeFinished:
    """Run the job; once it started, `interfere(the spool's record of its task)` from outside (in a thread:
    the runner's loop runs on meanwhile); its NodeFinished."""
    runner = JobRunner(launch, node_name="node1", spool_dir=spool, base_env=agent_env, confinement=confinement)

    async def drive() -> NodeFinished:
        events = runner.run()
        started = await anext(events)
        assert isinstance(started, NodeStarted)
        (record,) = TaskSpool(spool).records()
        await asyncio.to_thread(interfere, record)
        finished = await asyncio.wait_for(anext(events), timeout=10)
        assert isinstance(finished, NodeFinished)
        return finished

    return asyncio.run(drive())


def gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_leader_killed_from_outside_is_an_infrastructure_failure(signum, make_launch, agent_env, tmp_path):
    launch = make_launch(argv=["sleep", "30"])
    task: list[int] = []

    def kill_leader(record) -> None:
        task.append(record.pgid)
        os.kill(record.leader, signum)

    finished = run_and_interfere(launch, tmp_path / "spool", agent_env, kill_leader)
    assert finished.infrastructure is not None, finished
    assert finished.infrastructure.kind == "leader-killed"
    assert finished.infrastructure.reason == "task leader of rank 0 killed before it recorded the task's exit"
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(0, signal.SIGKILL)]
    assert finished.error is None and finished.fenced is None
    assert gone(task[0]), "the task died with its leader"


def test_a_task_killed_from_outside_while_its_leader_lives_is_its_own_end(make_launch, agent_env, tmp_path):
    finished = run_and_interfere(make_launch(argv=["sleep", "30"]), tmp_path / "spool", agent_env,
                                 lambda record: os.kill(record.pgid, signal.SIGKILL))
    assert finished.infrastructure is None
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(0, signal.SIGKILL)]


def test_a_cgroup_removed_under_the_job_is_an_infrastructure_failure(cgroup_tree, shared_dir,  # noqa: F811
                                                                    make_launch, agent_env):
    if not isinstance(cgroup_tree.tracker, Unified):
        pytest.skip("the sweep below is cgroup v2's (cgroup.kill)")
    launch = make_launch(user="root", workdir=str(shared_dir), argv=["sleep", "30"])
    job = cgroup_tree.tracker.root / f"job_{launch.job_id}"

    def sweep(record) -> None:
        """What another agent with the same cgroup root does to a cgroup it takes for a leftover of its own."""
        (job / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + 5
        while "populated 1" in (job / "cgroup.events").read_text() and time.monotonic() < deadline:
            time.sleep(0.01)
        for hierarchy in cgroup_tree.hierarchies:
            (hierarchy.root / job.name / "batch").rmdir()
            (hierarchy.root / job.name).rmdir()

    finished = run_and_interfere(launch, shared_dir / "spool", agent_env, sweep,
                                 Confinement(cgroups=cgroup_tree))
    assert finished.infrastructure is not None, finished
    assert finished.infrastructure.kind == "cgroup-removed"
    assert finished.infrastructure.reason == f"cgroup {job / 'batch'} removed while task 0 ran"
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(0, signal.SIGKILL)]


def run_to_end(launch, spool: Path, agent_env) -> NodeFinished:
    runner = JobRunner(launch, node_name="node1", spool_dir=spool, base_env=agent_env)

    async def drive() -> list:
        return [event async for event in runner.run()]

    *_, finished = asyncio.run(drive())
    assert isinstance(finished, NodeFinished)
    return finished


def test_a_start_the_agent_fails_for_a_reason_of_its_own_is_an_infrastructure_failure(make_launch, agent_env,
                                                                                      tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "launches").write_text("not a directory")  # the agent cannot record the launch in its spool
    finished = run_to_end(make_launch(argv=["true"]), spool, agent_env)
    assert finished.infrastructure is not None and finished.infrastructure.kind == "start-failed"
    assert finished.infrastructure.reason.startswith(f"cannot record the launch in {spool / 'launches'}: ")
    assert finished.error == finished.infrastructure.reason


def test_a_start_the_job_itself_prevents_is_not_an_infrastructure_failure(make_launch, agent_env, tmp_path):
    for launch in (make_launch(argv=["/nonexistent/corral-infra-command"]),
                   make_launch(argv=["true"], workdir=str(tmp_path / "missing"))):
        finished = run_to_end(launch, tmp_path / "spool", agent_env)
        assert finished.error is not None and finished.infrastructure is None, finished


def test_the_other_tasks_of_a_run_whose_leader_was_killed_are_killed_at_once(make_launch, agent_env, tmp_path):
    """The run is lost: its report does not wait for its other tasks to end by themselves."""
    launch = make_launch(argv=["sleep", "300"], tasks_per_node=2, num_tasks=2,
                         tasks=[TaskLaunch(rank=rank, local_rank=rank, gpus=[]) for rank in (0, 1)])
    spool = tmp_path / "spool"
    runner = JobRunner(launch, node_name="node1", spool_dir=spool, base_env=agent_env)

    async def drive() -> tuple[NodeFinished, float]:
        events = runner.run()
        assert isinstance(await anext(events), NodeStarted)
        records = {r.rank: r for r in TaskSpool(spool).records()}
        os.kill(records[0].leader, signal.SIGKILL)
        killed_at = time.monotonic()
        finished = await asyncio.wait_for(anext(events), timeout=20)
        return finished, time.monotonic() - killed_at

    finished, took_s = asyncio.run(drive())
    assert finished.infrastructure is not None and finished.infrastructure.kind == "leader-killed"
    assert [(t.rank, t.exit_code, t.signal) for t in finished.tasks] == [(0, 0, 9), (1, 0, 9)]
    assert took_s < 10, "rank 1 (sleep 300) was killed, not awaited"


def test_a_steps_leader_killed_from_outside_is_an_infrastructure_failure(make_step, agent_env, tmp_path):
    from corral.agent.step_runner import StepRunner
    from tests.agent.test_step_runner import Srun

    side = Srun(input="none")
    try:
        launch = make_step(argv=["sleep", "300"], **side.io_fields())
        side.streams.expect({"n1": [0]})
        spool = tmp_path / "spool"
        runner = StepRunner(launch, node_name="n1", spool_dir=spool, base_env=agent_env)

        async def scenario():
            task = asyncio.create_task(anext(runner.run()))
            while not TaskSpool(spool).records():
                await asyncio.sleep(0.02)
            (record,) = TaskSpool(spool).records()
            os.kill(record.leader, signal.SIGKILL)
            return await asyncio.wait_for(task, 10)

        finished = asyncio.run(scenario())
    finally:
        side.streams.close()
    assert finished.infrastructure is not None and finished.infrastructure.kind == "leader-killed"
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(0, signal.SIGKILL)]


HOG = "x = bytearray(256 << 20); x[::4096] = b'1' * len(x[::4096])"


def test_a_leader_lost_after_an_oom_kill_in_its_cgroup_is_the_jobs_own_end(cgroup_tree, shared_dir,  # noqa: F811
                                                                           make_launch, agent_env):
    """The leader shares the job's memory limit, so the OOM killer may take it (with memory.oom.group, it
    does): a leader lost after the kernel killed something of the job for memory is the job's own end,
    OUT_OF_MEMORY, not an infrastructure failure. Here the task's child is OOM-killed and the task then
    kills its leader (its parent), which is what the kernel's pick of the leader looks like to the agent."""
    if "memory" not in cgroup_tree.controllers:
        pytest.skip(f"no memory controller here ({cgroup_tree.describe()})")
    task = (f"import os, signal, subprocess, sys, time; subprocess.run([sys.executable, '-c', {HOG!r}]); "
            f"os.kill(os.getppid(), signal.SIGKILL); time.sleep(30)")
    launch = make_launch(user="root", workdir=str(shared_dir), mem_per_node_mib=32, argv=["python3", "-c", task])
    runner = JobRunner(launch, node_name="node1", spool_dir=shared_dir / "spool", base_env=agent_env,
                       confinement=Confinement(cgroups=cgroup_tree))

    async def drive() -> list:
        return [event async for event in runner.run()]

    *_, finished = asyncio.run(drive())
    assert finished.oom_killed and finished.infrastructure is None, finished
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(0, signal.SIGKILL)]
