"""srun --pty's agent end (StepRunner with `pty`) against srun's end (StepStreams): a real pseudo-terminal,
real processes, real loopback sockets. The tmux tests (tests/e2e/test_terminals.py) drive the whole path."""
from __future__ import annotations

import asyncio
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from corral import stepio
from corral.agent.step_runner import StepRunner
from corral.agent.tasks import Confinement
from corral.api.steps import StepSubmit
from corral.protocol import TaskExit
from tests.agent.test_step_runner import Srun, finish, runner_for, two_tasks


@pytest.fixture
def srun():
    made: list[Srun] = []

    def make(**kwargs) -> Srun:
        made.append(Srun(**kwargs))
        return made[-1]

    yield make
    for one in made:
        one.streams.close()


RANK0_THEN_WAIT = """
if [ "$SLURM_PROCID" != 0 ]; then echo rank1-output; echo rank1-error >&2; exit 0; fi
tty; stty size; [ -t 0 ] && echo stdin-is-a-terminal
trap 'stty size; exit 7' WINCH
touch {ready}
while :; do sleep 0.05; done
"""


def run_with(launch, tmp_path, agent_env, side, until_ready, then):
    async def scenario():
        side.streams.expect({"n1": [t.rank for t in launch.tasks]})
        task = asyncio.create_task(finish(runner_for(launch, tmp_path, agent_env)))
        while not until_ready.exists():
            await asyncio.sleep(0.02)
        then()
        return await asyncio.wait_for(task, 10)

    finished = asyncio.run(scenario())
    assert side.streams.wait(5)
    return finished


def test_task_0_has_a_terminal_of_srun_s_size_that_follows_a_resize(make_step, tmp_path, agent_env, srun):
    side = srun(input="0")
    ready = tmp_path / "ready"
    launch = make_step(argv=["sh", "-c", RANK0_THEN_WAIT.format(ready=ready)], pty=True, pty_rows=33,
                       pty_cols=111, **two_tasks(), **side.io_fields())
    finished = run_with(launch, tmp_path, agent_env, side, ready, lambda: side.streams.resize(50, 132))
    assert finished.tasks == [TaskExit(rank=0, exit_code=7), TaskExit(rank=1, exit_code=0)]
    lines = side.stdout.split("\r\n")  # the terminal's own line ends (onlcr)
    assert lines[0].startswith("/dev/pts/") and lines[1:4] == ["33 111", "stdin-is-a-terminal", "50 132"]
    assert "rank1" not in side.stdout + side.stderr  # the other tasks' streams are /dev/null, as in Slurm


def test_ctrl_c_typed_at_srun_interrupts_the_foreground_job(make_step, tmp_path, agent_env, srun):
    keys_read, keys_write = os.pipe()
    side = srun(input="0", stdin=os.fdopen(keys_read, "rb", buffering=0))
    ready = tmp_path / "ready"
    script = f"trap 'echo interrupted; exit 9' INT; touch {ready}; while :; do sleep 0.05; done"
    launch = make_step(argv=["sh", "-c", script], pty=True, **side.io_fields())
    try:
        finished = run_with(launch, tmp_path, agent_env, side, ready, lambda: os.write(keys_write, b"\x03"))
    finally:
        os.close(keys_write)
    assert finished.tasks == [TaskExit(rank=0, exit_code=9)]
    assert side.stdout.endswith("interrupted\r\n")


@pytest.fixture
def pty_user():
    """A real Unix user (named with pty, removed afterwards), and a directory it may work in."""
    name = f"ptyu{secrets.token_hex(3)}"
    subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", name], check=True)
    workdir = Path(tempfile.mkdtemp(prefix="corral-pty-"))
    try:
        user = pwd.getpwnam(name)
        os.chown(workdir, user.pw_uid, user.pw_gid)
        yield user, workdir
    finally:
        subprocess.run(["userdel", name], check=False)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None, reason="needs root and useradd")
def test_a_root_agent_hands_the_terminal_to_the_task_s_user_as_its_controlling_terminal(
        make_step, tmp_path, agent_env, srun, pty_user):
    user, workdir = pty_user
    side = srun(input="0")
    script = ('id -un; stat -c %U "$(tty)"; echo via-dev-tty > /dev/tty; '
              'ps -o tpgid= -p $$ | tr -d " "; echo $$')
    launch = make_step(argv=["sh", "-c", script], pty=True, user=user.pw_name, uid=user.pw_uid,
                       workdir=str(workdir), **side.io_fields())
    side.streams.expect({"n1": [0]})
    runner = StepRunner(launch, node_name="n1", spool_dir=tmp_path / "spool", base_env=agent_env,
                        confinement=Confinement(run_as_user=True))
    finished = asyncio.run(asyncio.wait_for(finish(runner), 20))
    assert side.streams.wait(5)
    assert finished.tasks == [TaskExit(rank=0, exit_code=0)], side.stdout
    name, owner, via_tty, foreground, shell = side.stdout.split("\r\n")[:5]
    assert (name, owner, via_tty) == (user.pw_name, user.pw_name, "via-dev-tty")
    assert foreground == shell  # its process group is the terminal's foreground group


def test_a_terminal_without_a_size_is_taken_as_it_is(make_step, tmp_path, agent_env, srun):
    """A terminal that never had a size says 0 0 (a fresh pty, some serial consoles): srun passes that on;
    the API refused it once (422), so srun --pty failed on such terminals."""
    StepSubmit(argv=["bash"], workdir="/", pty=True, pty_rows=0, pty_cols=0)
    side = srun(input="0")
    launch = make_step(argv=["stty", "size"], pty=True, pty_rows=0, pty_cols=0, **side.io_fields())
    side.streams.expect({"n1": [0]})
    finished = asyncio.run(asyncio.wait_for(finish(runner_for(launch, tmp_path, agent_env)), 20))
    assert side.streams.wait(5)
    assert finished.tasks == [TaskExit(rank=0, exit_code=0)] and side.stdout == "0 0\r\n"


@pytest.mark.parametrize("payload,parsed", [(b"24 80", (24, 80)), (b"0 0", (0, 0)), (b"65535 1", (65535, 1))])
def test_window_frames_carry_rows_and_columns(payload, parsed):
    assert stepio.parse_window(payload) == parsed == stepio.parse_window(stepio.window_payload(*parsed))


@pytest.mark.parametrize("payload", [b"", b"24", b"24 80 1", b"-1 80", b"65536 80", b"24 x", "٢ 80".encode()])
def test_a_bad_window_frame_is_a_protocol_error(payload):
    with pytest.raises(stepio.ProtocolError):
        stepio.parse_window(payload)
