"""StepRunner (the agent's end of a step) against srun's end (StepStreams): real processes, real
loopback sockets."""
from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import time

import pytest

from corral import stepio
from corral.agent.environment import step_environment
from corral.agent.step_runner import StepRunner
from corral.protocol import StepFinished, TaskExit, TaskLaunch
from corral.slurm.srun.step_streams import StepStreams


def two_tasks(**overrides):
    fields = dict(
        tasks=[TaskLaunch(rank=0, local_rank=0, gpus=[]), TaskLaunch(rank=1, local_rank=1, gpus=[])],
        num_tasks=2,
        tasks_per_node=[2],
    )
    fields.update(overrides)
    return fields


class Srun:
    """srun's side of one step: StepStreams writing into buffers."""

    def __init__(self, **kwargs) -> None:
        self.out, self.err = io.BytesIO(), io.BytesIO()
        self.streams = StepStreams(host="127.0.0.1", stdout=self.out, stderr=self.err, **kwargs).start()

    def io_fields(self) -> dict:
        return dict(io_host=self.streams.host, io_port=self.streams.port, io_token=self.streams.token)

    @property
    def stdout(self) -> str:
        return self.out.getvalue().decode()

    @property
    def stderr(self) -> str:
        return self.err.getvalue().decode()


@pytest.fixture
def srun():
    made: list[Srun] = []

    def make(**kwargs) -> Srun:
        made.append(Srun(**kwargs))
        return made[-1]

    yield make
    for one in made:
        one.streams.close()


def runner_for(launch, tmp_path, agent_env, node="n1"):
    return StepRunner(launch, node_name=node, spool_dir=tmp_path / "spool", base_env=agent_env)


async def finish(runner) -> StepFinished:
    (finished,) = [event async for event in runner.run()]
    return finished


def run_step(launch, tmp_path, agent_env, srun_side: Srun | None = None) -> StepFinished:
    if srun_side is not None:
        srun_side.streams.expect({"n1": [t.rank for t in launch.tasks]})
    finished = asyncio.run(asyncio.wait_for(finish(runner_for(launch, tmp_path, agent_env)), 20))
    if srun_side is not None:
        assert srun_side.streams.wait(5)
    return finished


def test_output_of_two_tasks_arrives_complete_and_labelled(make_step, tmp_path, agent_env, srun):
    side = srun(label=True, input="none")
    script = 'i=0; while [ $i -lt 200 ]; do echo "line $i of $SLURM_PROCID"; i=$((i+1)); done; printf end >&2'
    launch = make_step(argv=["sh", "-c", script], **two_tasks(), **side.io_fields())
    finished = run_step(launch, tmp_path, agent_env, side)
    assert finished == StepFinished(job_id=7, step_id=0, tasks=[TaskExit(rank=0, exit_code=0),
                                                                 TaskExit(rank=1, exit_code=0)])
    lines = side.stdout.splitlines()
    for rank in (0, 1):
        assert [line for line in lines if line.startswith(f"{rank}: ")] == [
            f"{rank}: line {i} of {rank}" for i in range(200)]
    assert len(lines) == 400
    assert sorted(side.stderr.splitlines()) == ["0: end", "1: end"]
    assert side.streams.exits == {0: (0, 0), 1: (0, 0)} and side.streams.failures == {}


def test_large_output_is_not_lost(make_step, tmp_path, agent_env, srun):
    side = srun(input="none")
    launch = make_step(argv=["sh", "-c", "head -c 3000000 /dev/zero"], **side.io_fields())
    run_step(launch, tmp_path, agent_env, side)
    assert len(side.out.getvalue()) == 3_000_000


def test_stdin_reaches_every_task_and_eof_ends_them(make_step, tmp_path, agent_env, srun):
    side = srun(label=True, stdin=io.BytesIO(b"first\nsecond\n"))
    launch = make_step(argv=["sh", "-c", "cat"], **two_tasks(), **side.io_fields())
    finished = run_step(launch, tmp_path, agent_env, side)
    assert [t.exit_code for t in finished.tasks] == [0, 0]
    assert sorted(side.stdout.splitlines()) == ["0: first", "0: second", "1: first", "1: second"]


def test_stdin_for_one_rank_only(make_step, tmp_path, agent_env, srun):
    read_end, write_end = os.pipe()
    with open(read_end, "rb", buffering=0) as stdin:
        side = srun(label=True, stdin=stdin, input="1")
        launch = make_step(argv=["sh", "-c", 'cat; echo "done $SLURM_PROCID"'], input="1", **two_tasks(),
                           **side.io_fields())

        async def scenario():
            side.streams.expect({"n1": [0, 1]})
            task = asyncio.create_task(finish(runner_for(launch, tmp_path, agent_env)))
            await asyncio.sleep(0.3)
            assert not task.done()  # rank 1 waits for srun's stdin; rank 0 read /dev/null
            os.write(write_end, b"only one\n")
            os.close(write_end)
            return await asyncio.wait_for(task, 10)

        asyncio.run(scenario())
    assert side.streams.wait(5)
    assert sorted(side.stdout.splitlines()) == ["0: done 0", "1: done 1", "1: only one"]


def test_exit_codes_and_signal_deaths_per_rank(make_step, tmp_path, agent_env, srun):
    side = srun(input="none")
    script = 'if [ $SLURM_PROCID = 0 ]; then exit 3; else kill -9 $$; fi'
    launch = make_step(argv=["sh", "-c", script], **two_tasks(), **side.io_fields())
    finished = run_step(launch, tmp_path, agent_env, side)
    assert finished.tasks == [TaskExit(rank=0, exit_code=3), TaskExit(rank=1, exit_code=0, signal=9)]
    assert finished.error is None
    assert side.streams.exits == {0: (3, 0), 1: (0, 9)}


def test_missing_command_is_127_and_a_failed_node(make_step, tmp_path, agent_env, srun):
    side = srun(input="none")
    launch = make_step(argv=["/no/such/program"], **two_tasks(), **side.io_fields())
    finished = run_step(launch, tmp_path, agent_env, side)
    assert [t.exit_code for t in finished.tasks] == [127, 127]
    assert "command not found" in finished.error
    assert side.streams.exits == {0: (127, 0), 1: (127, 0)}
    assert "command not found" in side.streams.failures["n1"]


def test_missing_workdir_fails_the_step(make_step, tmp_path, agent_env, srun):
    side = srun(input="none")
    launch = make_step(workdir=str(tmp_path / "gone"), **side.io_fields())
    finished = run_step(launch, tmp_path, agent_env, side)
    assert finished.tasks == [TaskExit(rank=0, exit_code=1)] and "working directory" in finished.error
    assert "working directory" in side.streams.failures["n1"]


def test_unreachable_srun_starts_nothing(make_step, tmp_path, agent_env):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # nobody listens there
    marker = tmp_path / "ran"
    launch = make_step(argv=["touch", str(marker)], io_host="127.0.0.1", io_port=port, io_token="t")
    started = time.monotonic()
    finished = run_step(launch, tmp_path, agent_env)
    assert time.monotonic() - started < 5
    assert "cannot connect to srun" in finished.error and finished.tasks == [TaskExit(rank=0, exit_code=1)]
    assert not marker.exists()


def test_srun_gone_kills_the_tasks(make_step, tmp_path, agent_env, srun, is_dead):
    side = srun(input="none")
    pid_file = tmp_path / "pid"
    launch = make_step(argv=["sh", "-c", f"echo $$ > {pid_file}; exec sleep 30"], **side.io_fields())

    async def scenario():
        side.streams.expect({"n1": [0]})
        runner = runner_for(launch, tmp_path, agent_env)
        task = asyncio.create_task(finish(runner))
        while not pid_file.exists() or not pid_file.read_text().strip():
            await asyncio.sleep(0.02)
        side.streams.close()  # srun is gone
        return await asyncio.wait_for(task, 10)

    finished = asyncio.run(scenario())
    assert finished.tasks == [TaskExit(rank=0, exit_code=0, signal=signal.SIGTERM)]
    assert "srun" in finished.error
    assert is_dead(int(pid_file.read_text()))


def test_signal_frame_reaches_the_task(make_step, tmp_path, agent_env, srun):
    side = srun(input="none")
    ready = tmp_path / "ready"
    script = f"trap 'echo got USR1; exit 0' USR1; touch {ready}; while :; do sleep 0.05; done"
    launch = make_step(argv=["sh", "-c", script], **side.io_fields())

    async def scenario():
        side.streams.expect({"n1": [0]})
        task = asyncio.create_task(finish(runner_for(launch, tmp_path, agent_env)))
        while not ready.exists():
            await asyncio.sleep(0.02)
        side.streams.signal(signal.SIGUSR1)
        return await asyncio.wait_for(task, 10)

    finished = asyncio.run(scenario())
    assert side.streams.wait(5)
    assert finished.tasks == [TaskExit(rank=0, exit_code=0)]
    assert side.stdout == "got USR1\n"


def test_kill_signals_then_sigkills(make_step, tmp_path, agent_env, srun):
    side = srun(input="none")
    ready = tmp_path / "ready"
    launch = make_step(argv=["sh", "-c", f"trap '' TERM; touch {ready}; while :; do sleep 0.05; done"],
                       **side.io_fields())

    async def scenario():
        side.streams.expect({"n1": [0]})
        runner = runner_for(launch, tmp_path, agent_env)
        task = asyncio.create_task(finish(runner))
        while not ready.exists():
            await asyncio.sleep(0.02)
        await runner.kill(signal.SIGTERM, 0.3)
        return await asyncio.wait_for(task, 10)

    finished = asyncio.run(scenario())
    assert finished.tasks == [TaskExit(rank=0, exit_code=0, signal=signal.SIGKILL)]
    assert side.streams.wait(5) and side.streams.exits == {0: (0, 9)}


def test_output_files_with_step_patterns(make_step, tmp_path, agent_env, srun):
    side = srun(input="none")
    launch = make_step(argv=["sh", "-c", "echo out $SLURM_PROCID; echo err $SLURM_PROCID >&2"], step_id=3,
                       output="%j.%s.%t.out", **two_tasks(), **side.io_fields())
    run_step(launch, tmp_path, agent_env, side)
    for rank in (0, 1):  # with --output only, stderr joins stdout's file
        assert (tmp_path / f"7.3.{rank}.out").read_text() == f"out {rank}\nerr {rank}\n"
    assert side.stdout == "" and side.streams.exits == {0: (0, 0), 1: (0, 0)}


def test_error_file_only_keeps_stdout_on_srun(make_step, tmp_path, agent_env, srun):
    side = srun(input="none")
    launch = make_step(argv=["sh", "-c", "echo out; echo err >&2"], step_id=2, error="%J-%n.err",
                       **side.io_fields())
    run_step(launch, tmp_path, agent_env, side)
    assert (tmp_path / "7.2-0.err").read_text() == "err\n"
    assert side.stdout == "out\n" and side.stderr == ""


def test_without_srun_listening_output_goes_to_files_or_nowhere(make_step, tmp_path, agent_env):
    launch = make_step(argv=["sh", "-c", "echo hi; cat"], output="o-%s")
    finished = run_step(launch, tmp_path, agent_env)
    assert finished.tasks == [TaskExit(rank=0, exit_code=0)]
    assert (tmp_path / "o-0").read_text() == "hi\n"


def test_step_environment_presence(make_step, tmp_path, agent_env, srun):
    side = srun(input="none")
    launch = make_step(
        argv=["sh", "-c", 'env > "env.$SLURM_PROCID"'],
        job_nodes=["n1", "n2"], step_nodes=["n1", "n2"], node_index=1, tasks_per_node=[2, 2], num_tasks=4,
        tasks=[TaskLaunch(rank=2, local_rank=0, gpus=[1]), TaskLaunch(rank=3, local_rank=1, gpus=[])],
        node_gpus=[0, 1], cpus_on_node=8, restart_count=1, master_addr="n1", master_port=29411,
        env={"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_STEP_GPUS": "0,1", "SLURM_PROCID": "0", "KEEP": "yes"},
        **side.io_fields(),
    )
    side.streams.expect({"n1": [0, 1], "n2": [2, 3]})
    asyncio.run(finish(runner_for(launch, tmp_path, agent_env, node="n2")))
    envs = {rank: read_env(tmp_path / f"env.{rank}") for rank in (2, 3)}
    two, three = envs[2], envs[3]
    assert {k: two[k] for k in ("SLURM_PROCID", "SLURM_LOCALID", "RANK", "LOCAL_RANK", "SLURM_NODEID")} == {
        "SLURM_PROCID": "2", "SLURM_LOCALID": "0", "RANK": "2", "LOCAL_RANK": "0", "SLURM_NODEID": "1"}
    assert (two["SLURM_STEP_ID"], two["SLURM_STEPID"], two["SLURM_JOB_ID"]) == ("0", "0", "7")
    assert (two["SLURM_NTASKS"], two["SLURM_NPROCS"], two["SLURM_STEP_NUM_TASKS"], two["WORLD_SIZE"]) == (
        "4", "4", "4", "4")
    assert (two["SLURM_TASKS_PER_NODE"], two["SLURM_STEP_TASKS_PER_NODE"]) == ("2(x2)", "2(x2)")
    assert (two["SLURM_NODELIST"], two["SLURM_STEP_NODELIST"], two["SLURM_JOB_NODELIST"]) == (
        "n[1-2]", "n[1-2]", "n[1-2]")
    assert (two["SLURM_GTIDS"], two["LOCAL_WORLD_SIZE"], two["SLURMD_NODENAME"]) == ("2,3", "2", "n2")
    assert (two["SLURM_JOB_CPUS_PER_NODE"], two["SLURM_CPUS_ON_NODE"], two["SLURM_GPUS_ON_NODE"]) == (
        "8(x2)", "8", "2")
    assert (two["MASTER_ADDR"], two["MASTER_PORT"], two["SLURM_RESTART_COUNT"]) == ("n1", "29411", "1")
    assert two["SLURM_SRUN_COMM_PORT"] == str(side.streams.port) and two["SLURM_SRUN_COMM_HOST"] == "127.0.0.1"
    assert (two["CUDA_VISIBLE_DEVICES"], two["SLURM_STEP_GPUS"], two["SLURM_JOB_GPUS"]) == ("1", "1", "0,1")
    assert "CUDA_VISIBLE_DEVICES" not in three and "SLURM_STEP_GPUS" not in three
    assert two["KEEP"] == "yes"
    for absent in ("SLURM_NTASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "SLURM_GPUS_PER_TASK"):
        assert absent not in two


def test_task_counts_per_node_come_only_from_what_srun_exported(make_step):
    launch = make_step(env={"SLURM_NTASKS_PER_NODE": "2", "SLURM_CPUS_PER_TASK": "4"})
    task = launch.tasks[0]
    env = step_environment(launch, task, "n1", {"PATH": "/bin", "SLURM_NTASKS_PER_NODE": "9"})
    assert (env["SLURM_NTASKS_PER_NODE"], env["SLURM_CPUS_PER_TASK"]) == ("2", "4")
    bare = step_environment(make_step(), task, "n1", {"PATH": "/bin", "SLURM_NTASKS_PER_NODE": "9"})
    assert "SLURM_NTASKS_PER_NODE" not in bare and "SLURM_CPUS_PER_TASK" not in bare
    assert "SLURM_SRUN_COMM_HOST" not in bare and "SLURM_RESTART_COUNT" not in bare


def read_env(path):
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_unknown_frames_from_srun_are_ignored(make_step, tmp_path, agent_env):
    """A hand-made srun that sends a frame type this agent does not know, then stdin."""
    listener = socket.create_server(("127.0.0.1", 0))
    launch = make_step(argv=["cat"], io_host="127.0.0.1", io_port=listener.getsockname()[1], io_token="t")

    async def scenario():
        task = asyncio.create_task(finish(runner_for(launch, tmp_path, agent_env)))
        loop = asyncio.get_running_loop()
        listener.setblocking(False)
        conn, _ = await loop.sock_accept(listener)
        await loop.sock_sendall(conn, stepio.frame(b"?", 0, b"future") + stepio.frame(stepio.STDIN, 0, b"hi\n")
                                + stepio.frame(stepio.STDIN_CLOSED, stepio.ALL_RANKS))
        received = b""
        while chunk := await loop.sock_recv(conn, 65536):
            received += chunk
        conn.close()
        return await task, received

    finished, received = asyncio.run(scenario())
    listener.close()
    hello, frames = received.split(b"\n", 1)
    assert b'"node":"n1"' in hello
    assert stepio.FrameDecoder().feed(frames) == [(stepio.STDOUT, 0, b"hi\n"),
                                                  (stepio.EXIT, 0, stepio.exit_payload(0, 0))]
    assert finished.tasks == [TaskExit(rank=0, exit_code=0)]
