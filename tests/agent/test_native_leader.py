"""The task leader is a native program (task_leader.c, decision 0022), spawned by the leader factory: what it
gives the task (a clean start: default signals, no stray file descriptors, the task's own PATH), and how
it refuses what it cannot run."""
from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from corral.agent.leaders import LEADER_PROGRAM, LeaderFactory, TaskStartFailed, begin_task, leader_factory, read_exit

ENV = {"PATH": os.environ["PATH"]}
STANDARD_SIGNALS = (1 << 31) - 1


def start(argv: list[str], exit_dir: Path, env: dict[str, str] = ENV, **options) -> object:
    starting = begin_task(argv, cwd="/", env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, user=None, exit_dir=exit_dir, **options)
    return asyncio.run(starting.result())


def status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {name} in /proc/{pid}/status")


def until_asleep(pid: int, timeout_s: float = 5.0) -> None:
    """Until `pid` sleeps (state S: `sleep` in its nanosleep, past its program's start-up)."""
    deadline = time.monotonic() + timeout_s
    while status_field(pid, "State")[0] != "S":
        assert time.monotonic() < deadline, f"{pid} never went to sleep"
        time.sleep(0.01)


def test_the_leader_is_the_native_program_not_a_python_process(tmp_path):
    task = start(["sleep", "30"], tmp_path)
    try:
        leader = psutil.Process(task.leader_pid)
        assert leader.exe() == str(LEADER_PROGRAM)
        assert leader.cmdline()[0] == str(LEADER_PROGRAM)
        assert psutil.Process(task.pid).ppid() == task.leader_pid
    finally:
        task.confirm(recorded=False)
    assert asyncio.run(task.wait()) == -signal.SIGKILL


def test_the_task_starts_with_default_signals_and_only_its_three_streams(tmp_path):
    # The factory ignores SIGCHLD and SIGINT, and Python ignores SIGPIPE: none of that may reach the task,
    # and neither may the leader's spec and reply pipes (a step's pipe would never reach end of file).
    task = start(["sleep", "30"], tmp_path)
    try:
        # Signals 1-31; 32 and 33 are glibc's own, which its signal() leaves alone and every glibc program
        # sets up at its start.
        assert int(status_field(task.pid, "SigIgn"), 16) & STANDARD_SIGNALS == 0
        assert int(status_field(task.pid, "SigBlk"), 16) == 0
        # The reply comes as soon as the exec succeeded: the dynamic loader may still hold libc open.
        until_asleep(task.pid)
        assert sorted(int(fd) for fd in os.listdir(f"/proc/{task.pid}/fd")) == [0, 1, 2]
        leader_fds = sorted(int(fd) for fd in os.listdir(f"/proc/{task.leader_pid}/fd"))
        assert len(leader_fds) <= 5  # 0-2 (now /dev/null), the spec pipe until confirmed, a pidfd
    finally:
        task.confirm(recorded=True)
        os.killpg(task.pid, signal.SIGTERM)
    assert asyncio.run(task.wait()) == -signal.SIGTERM
    assert read_exit(task.exit_file) == -signal.SIGTERM


def test_a_signal_the_agent_ignores_is_default_again_in_the_task(tmp_path):
    # An ignored signal survives exec, so the factory (started by an agent that ignores SIGUSR1 and SIGHUP,
    # as under nohup) inherits it; it resets every signal once, and each forked leader the three it ignores.
    leader_factory().close()
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGUSR1, signal.SIGHUP)}
    try:
        task = start(["sleep", "30"], tmp_path)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    try:
        assert int(status_field(leader_factory().pid, "SigIgn"), 16) & STANDARD_SIGNALS == (
            1 << (signal.SIGCHLD - 1)) | (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGPIPE - 1))
        for pid in (task.leader_pid, task.pid):
            assert int(status_field(pid, "SigIgn"), 16) & STANDARD_SIGNALS == 0
    finally:
        task.confirm(recorded=True)
        os.killpg(task.pid, signal.SIGHUP)
    assert asyncio.run(task.wait()) == -signal.SIGHUP
    leader_factory().close()


def test_the_program_is_searched_on_the_tasks_own_path(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "only-here"
    program.write_text("#!/bin/sh\nexit 7\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    task = start(["only-here"], tmp_path / "exits", env={"PATH": f"/nonexistent:{bin_dir}"})
    task.confirm(recorded=True)
    assert asyncio.run(task.wait()) == 7
    with pytest.raises(TaskStartFailed, match="command not found: only-here") as failed:
        start(["only-here"], tmp_path / "exits")
    assert failed.value.exit_code == 127 and not failed.value.own


def test_a_program_that_cannot_run_is_refused_with_the_shells_exit_codes(tmp_path):
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(TaskStartFailed, match=f"cannot execute {script}: Permission denied") as failed:
        start([str(script)], tmp_path / "exits")
    assert failed.value.exit_code == 126
    with pytest.raises(TaskStartFailed, match="command not found: /nonexistent/x") as failed:
        start(["/nonexistent/x"], tmp_path / "exits")
    assert failed.value.exit_code == 127
    assert list((tmp_path / "exits").glob("*.exit")) == []  # nothing recorded for a task that never ran


@pytest.mark.parametrize(("argv", "env", "message"), [
    (["echo", "a\0b"], ENV, "embedded null byte"),
    (["true"], {**ENV, "A=B": "c"}, "illegal environment variable name 'A=B'"),
    (["true"], {**ENV, "A": "b\0c"}, "embedded null byte"),
    ([], ENV, "no program to run"),
])
def test_what_no_process_can_be_given_is_refused_before_a_leader_starts(tmp_path, argv, env, message):
    with pytest.raises(ValueError, match=message):
        start(argv, tmp_path, env=env)
    assert not tmp_path.joinpath("1.exit").exists()


def test_a_leader_given_a_malformed_spec_says_so_and_starts_nothing(tmp_path):
    spec_read, spec_write = os.pipe()
    reply_read, reply_write = os.pipe()
    leader = subprocess.Popen([str(LEADER_PROGRAM), str(spec_read), str(reply_write)],
                              pass_fds=(spec_read, reply_write), stdin=subprocess.DEVNULL)
    os.close(spec_read)
    os.close(reply_write)
    os.write(spec_write, b"5\nab")  # shorter than it says, and then the agent is gone
    os.close(spec_write)
    assert leader.wait(10) == 0
    with os.fdopen(reply_read, "rb") as reply:
        assert reply.read() == (b'{"error": "the task\'s leader got a malformed spec", "exit_code": 1, '
                                b'"own": true}')


def test_the_leader_without_its_arguments_explains_itself():
    result = subprocess.run([str(LEADER_PROGRAM)], capture_output=True, text=True, timeout=10)
    assert result.returncode == 2
    assert "usage:" in result.stderr and "SPEC_FD REPLY_FD" in result.stderr and "--factory SOCKET_FD" in result.stderr


def test_a_missing_leader_program_is_named_with_how_to_build_it(tmp_path, monkeypatch):
    # An install without `make venv` has no leader program: the factory (the same program) cannot start.
    from corral.agent import leaders

    missing = tmp_path / "corral-task-leader"
    monkeypatch.setattr(leaders, "LEADER_PROGRAM", missing)
    fds = [os.open(os.devnull, os.O_RDWR) for _ in range(5)]
    factory = LeaderFactory()
    try:
        with pytest.raises(OSError) as failed:
            factory.fork_leader(fds, [])
    finally:
        factory.close()
        for fd in fds:
            os.close(fd)
    assert str(failed.value) == (f"cannot start the task leader {missing}: No such file or directory "
                                 "(build it: make venv)")
