"""JobRunner against real processes: spawning, environments, output files, signals, failures."""
from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
import time

import pytest

from corral.agent.runner import JobRunner, task_exit
from corral.protocol import NodeFinished, NodeStarted, TaskExit, TaskLaunch


def runner_for(launch, tmp_path, agent_env):
    return JobRunner(launch, node_name="n2", spool_dir=tmp_path / "spool", base_env=agent_env)


async def run_to_end(runner):
    return [event async for event in runner.run()]


def test_tasks_get_their_own_environment(make_launch, tmp_path, agent_env):
    launch = make_launch(
        nodes=["n1", "n2"],
        node_index=1,
        tasks_per_node=2,
        num_tasks=4,
        node_gpus=[0, 1, 2, 3],
        tasks=[TaskLaunch(rank=2, local_rank=0, gpus=[0, 1]), TaskLaunch(rank=3, local_rank=1, gpus=[2, 3])],
        argv=["sh", "-c", 'env > "env.$SLURM_PROCID"'],
    )
    started, finished = asyncio.run(run_to_end(runner_for(launch, tmp_path, agent_env)))
    assert isinstance(started, NodeStarted) and len(started.pids) == 2
    assert finished == NodeFinished(job_id=7, tasks=[TaskExit(rank=2, exit_code=0), TaskExit(rank=3, exit_code=0)],
                                     restart_count=0)
    envs = {rank: read_env(tmp_path / f"env.{rank}") for rank in (2, 3)}
    assert envs[2]["CUDA_VISIBLE_DEVICES"] == "0,1" and envs[3]["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert (envs[2]["SLURM_LOCALID"], envs[3]["SLURM_LOCALID"]) == ("0", "1")
    assert envs[3]["SLURM_JOB_NODELIST"] == "n[1-2]" and envs[3]["SLURMD_NODENAME"] == "n2"
    assert os.path.realpath(envs[2]["PWD"]) == os.path.realpath(tmp_path)


def read_env(path):
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_exit_codes_per_task(make_launch, tmp_path, agent_env):
    launch = make_launch(
        tasks=[TaskLaunch(rank=0, local_rank=0, gpus=[]), TaskLaunch(rank=1, local_rank=1, gpus=[])],
        argv=["sh", "-c", 'exit $((SLURM_PROCID + 3))'],
    )
    _, finished = asyncio.run(run_to_end(runner_for(launch, tmp_path, agent_env)))
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(3, 0), (4, 0)]
    assert finished.error is None


def test_output_is_appended_and_stderr_joins_stdout(make_launch, tmp_path, agent_env):
    launch = make_launch(argv=["sh", "-c", "echo out; echo err >&2"], output="logs-%x/%j.%t.out")
    (tmp_path / "logs-test").mkdir()
    for _ in range(2):
        asyncio.run(run_to_end(runner_for(launch, tmp_path, agent_env)))
    assert (tmp_path / "logs-test" / "7.0.out").read_text() == "out\nerr\nout\nerr\n"


def test_array_ids_in_output_names_come_from_the_jobs_environment(make_launch, tmp_path, agent_env):
    launch = make_launch(env={"SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "2"}, output="%A_%a.%j.out")
    asyncio.run(run_to_end(runner_for(launch, tmp_path, agent_env)))
    assert (tmp_path / "40_2.7.out").exists()


def test_separate_error_file_with_absolute_path(make_launch, tmp_path, agent_env):
    error_path = tmp_path / "abs" / "job-%j.err"
    error_path.parent.mkdir()
    launch = make_launch(argv=["sh", "-c", "echo out; echo err >&2"], output="o.txt", error=str(error_path))
    asyncio.run(run_to_end(runner_for(launch, tmp_path, agent_env)))
    assert (tmp_path / "o.txt").read_text() == "out\n"
    assert (tmp_path / "abs" / "job-7.err").read_text() == "err\n"


def test_script_job_runs_its_script_with_arguments(make_launch, tmp_path, agent_env):
    script = '#!/bin/sh\necho "args: $*"\nstat -c %a "$0"\n'
    launch = make_launch(script=script, argv=["one", "two"], output="out.txt")
    _, finished = asyncio.run(run_to_end(runner_for(launch, tmp_path, agent_env)))
    assert finished.tasks[0].exit_code == 0
    assert (tmp_path / "out.txt").read_text() == "args: one two\n700\n"
    assert not (tmp_path / "spool" / "job7").exists()  # the job's spool directory is cleaned up


def test_kill_with_grace_lets_a_trapping_task_exit_cleanly(make_launch, tmp_path, agent_env):
    launch = make_launch(argv=["sh", "-c", 'trap "exit 0" TERM; echo ready > ready; sleep 30 & wait'])
    finished = asyncio.run(start_then_kill(runner_for(launch, tmp_path, agent_env), tmp_path, grace_s=3.0))
    assert finished.tasks == [TaskExit(rank=0, exit_code=0, signal=0)]


def test_kill_escalates_to_sigkill_after_grace(make_launch, tmp_path, agent_env):
    launch = make_launch(argv=["sh", "-c", 'trap "" TERM; echo ready > ready; sleep 30'])
    started_at = time.monotonic()
    finished = asyncio.run(start_then_kill(runner_for(launch, tmp_path, agent_env), tmp_path, grace_s=0.3))
    assert finished.tasks == [TaskExit(rank=0, exit_code=0, signal=signal.SIGKILL)]
    assert 0.3 <= time.monotonic() - started_at < 3


def test_kill_reaches_the_tasks_children(make_launch, tmp_path, agent_env, is_dead):
    launch = make_launch(argv=["sh", "-c", 'sleep 30 & echo $! > child.pid; echo ready > ready; wait'])
    finished = asyncio.run(start_then_kill(runner_for(launch, tmp_path, agent_env), tmp_path, grace_s=2.0))
    assert finished.tasks == [TaskExit(rank=0, exit_code=0, signal=signal.SIGTERM)]
    assert is_dead(int((tmp_path / "child.pid").read_text()))


def test_leftover_children_die_with_their_task(make_launch, tmp_path, agent_env, is_dead):
    launch = make_launch(argv=["sh", "-c", "sleep 30 & echo $! > child.pid"])
    _, finished = asyncio.run(run_to_end(runner_for(launch, tmp_path, agent_env)))
    assert finished.tasks[0].exit_code == 0
    assert is_dead(int((tmp_path / "child.pid").read_text()))


def test_during_a_kill_leftovers_get_the_grace_to_finish(make_launch, tmp_path, agent_env, is_dead):
    # Slurm's KillWait: what a killed task left in its group (an srun relaying its step's end) gets the
    # signal and until the grace is over; one that ignores it dies then.
    child = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.3), "
             "open('child-done', 'w').close(), sys.exit(0))); "
             "open('child.pid', 'w').write(str(__import__('os').getpid()));"
             " time.sleep(30)")
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(30)"
    launch = make_launch(argv=["sh", "-c", f"{sys.executable} -c \"{child}\" & {sys.executable} -c '{stubborn}' & "
                                           f"echo $! > stubborn.pid; sleep 0.3; echo ready > ready; wait"])
    started_at = time.monotonic()
    asyncio.run(start_then_kill(runner_for(launch, tmp_path, agent_env), tmp_path, grace_s=1.5))
    assert (tmp_path / "child-done").exists(), "the leftover finished its SIGTERM handler"
    assert is_dead(int((tmp_path / "stubborn.pid").read_text()))
    assert 1.5 <= time.monotonic() - started_at < 5, "the one ignoring SIGTERM was killed when the grace ended"


def test_kill_leaves_other_process_groups_alone(make_launch, tmp_path, agent_env, is_dead):
    outsider = os.spawnvp(os.P_NOWAIT, "sleep", ["sleep", "30"])  # same session as the test, not the job
    try:
        launch = make_launch(argv=["sh", "-c", "echo ready > ready; sleep 30"])
        asyncio.run(start_then_kill(runner_for(launch, tmp_path, agent_env), tmp_path, grace_s=1.0))
        assert not is_dead(outsider, within_s=0)
    finally:
        os.kill(outsider, signal.SIGKILL)
        os.waitpid(outsider, 0)


async def start_then_kill(runner, workdir, grace_s, signum=signal.SIGTERM):
    """Start the job, wait until its task wrote `ready` (its traps are set), kill, return NodeFinished."""
    events = runner.run()
    started = await anext(events)
    assert isinstance(started, NodeStarted)
    deadline = time.monotonic() + 3
    while not (workdir / "ready").exists():
        assert time.monotonic() < deadline, "task never became ready"
        await asyncio.sleep(0.01)
    await runner.kill(signum, grace_s)
    finished = await anext(events)
    assert isinstance(finished, NodeFinished)
    return finished


def test_signal_only_when_grace_is_negative(make_launch, tmp_path, agent_env):
    launch = make_launch(argv=["sh", "-c", 'trap "echo got USR1 >> log" USR1; echo ready > ready; sleep 0.5; exit 0'])
    runner = runner_for(launch, tmp_path, agent_env)

    async def scenario():
        events = runner.run()
        await anext(events)
        while not (tmp_path / "ready").exists():
            await asyncio.sleep(0.01)
        await runner.kill(signal.SIGUSR1, -1)
        return await anext(events)

    finished = asyncio.run(scenario())
    assert finished.tasks == [TaskExit(rank=0, exit_code=0)]
    assert (tmp_path / "log").read_text() == "got USR1\n"


@pytest.mark.parametrize(
    ("overrides", "exit_code", "message"),
    [
        ({"workdir": "/nonexistent/dir"}, 1, "working directory"),
        ({"argv": ["/nonexistent/program"]}, 127, "command not found"),
        ({"argv": ["no-such-command-anywhere"]}, 127, "command not found"),
        ({"output": "missing-dir/out.txt"}, 1, "cannot open output file"),
        ({"error": "/nonexistent/err.txt"}, 1, "cannot open output file"),
        ({"script": "echo no interpreter line\n"}, 1, "#!"),
        ({"argv": []}, 1, "neither a script nor a command"),
    ],
)
def test_spawn_failures_are_reported(make_launch, tmp_path, agent_env, overrides, exit_code, message):
    launch = make_launch(**overrides)
    (event,) = asyncio.run(run_to_end(runner_for(launch, tmp_path, agent_env)))
    assert isinstance(event, NodeFinished)
    assert message in event.error
    assert event.tasks == [TaskExit(rank=0, exit_code=exit_code)]


def test_non_executable_file_is_126(make_launch, tmp_path, agent_env):
    program = tmp_path / "prog"
    program.write_text("#!/bin/sh\n")
    program.chmod(stat.S_IRUSR | stat.S_IWUSR)
    (event,) = asyncio.run(run_to_end(runner_for(make_launch(argv=[str(program)]), tmp_path, agent_env)))
    assert event.tasks == [TaskExit(rank=0, exit_code=126)]


def test_partial_spawn_failure_kills_the_started_tasks(make_launch, tmp_path, agent_env, is_dead):
    (tmp_path / "dir0").mkdir()  # task 0 can open its error file, task 1 cannot
    launch = make_launch(
        tasks=[TaskLaunch(rank=0, local_rank=0, gpus=[]), TaskLaunch(rank=1, local_rank=1, gpus=[])],
        argv=["sleep", "30"],
        error="dir%t/err",
    )
    runner = runner_for(launch, tmp_path, agent_env)
    (event,) = asyncio.run(run_to_end(runner))
    assert "dir1/err" in event.error
    assert [t.exit_code for t in event.tasks] == [1, 1]
    assert len(runner.pids) == 1 and is_dead(runner.pids[0])


def test_task_exit_conversion():
    assert task_exit(3, 0) == TaskExit(rank=3, exit_code=0, signal=0)
    assert task_exit(3, 137) == TaskExit(rank=3, exit_code=137, signal=0)  # a shell reporting its child
    assert task_exit(3, -9) == TaskExit(rank=3, exit_code=0, signal=9)  # Slurm's "0:9"


def test_development_mode_tasks_get_the_agent_users_login_variables_not_its_environment(make_launch, tmp_path):
    import pwd

    me = pwd.getpwuid(os.geteuid())
    launch = make_launch(env={}, argv=["sh", "-c", 'env > "env.$SLURM_PROCID"'])
    runner = JobRunner(launch, node_name="n2", spool_dir=tmp_path / "spool", base_env={"PATH": "/usr/bin:/bin"})
    asyncio.run(run_to_end(runner))
    env = read_env(tmp_path / "env.0")
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == (me.pw_dir, me.pw_name, me.pw_name)
