"""Task leaders come from one leader factory per agent process (`corral-task-leader --factory`): forked, not
started as a new Python each, and still their own sessions that outlive the agent (decision 0015)."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from corral.agent.leaders import LEADER_PROGRAM, TaskStartFailed, begin_task, leader_factory, read_exit
from tests.agent.test_adoption import alive

ENV = {"PATH": os.environ["PATH"]}


def start(argv: list[str], exit_dir: Path, **options) -> object:
    starting = begin_task(argv, cwd="/", env=ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, user=None, exit_dir=exit_dir, **options)
    return asyncio.run(starting.result())


def factory_pid(leader_pid: int) -> int:
    return psutil.Process(leader_pid).ppid()


def wait_until(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_every_leader_is_forked_by_one_factory_and_is_its_own_session(tmp_path):
    tasks = [start(["sleep", "30"], tmp_path) for _ in range(3)]
    try:
        factories = {factory_pid(task.leader_pid) for task in tasks}
        assert len(factories) == 1
        (factory,) = factories
        assert factory != os.getpid()
        assert psutil.Process(factory).ppid() == os.getpid()  # the factory is the agent's child
        assert psutil.Process(factory).cmdline()[:2] == [str(LEADER_PROGRAM), "--factory"]
        for task in tasks:
            assert os.getsid(task.leader_pid) == task.leader_pid  # a session of its own: outlives the agent
            assert os.getsid(task.pid) == task.pid
            assert psutil.Process(task.pid).ppid() == task.leader_pid
            assert psutil.Process(task.leader_pid).cmdline()[:2] == [str(LEADER_PROGRAM), "--leader"]
    finally:
        for task in tasks:
            task.confirm(recorded=False)  # the leader kills its unrecorded task
    for task in tasks:
        assert asyncio.run(task.wait()) == -signal.SIGKILL


def test_a_task_started_by_a_forked_leader_reports_its_exit(tmp_path):
    out = tmp_path / "out"
    with open(out, "wb") as stdout:
        starting = begin_task(["sh", "-c", "echo hello from $0; exit 3", "task"], cwd=str(tmp_path), env=ENV,
                              stdin=subprocess.DEVNULL, stdout=stdout.fileno(), stderr=stdout.fileno(), user=None,
                              exit_dir=tmp_path / "exits")
    task = asyncio.run(starting.result())
    task.confirm(recorded=True)
    assert asyncio.run(task.wait()) == 3
    assert out.read_text() == "hello from task\n"
    assert read_exit(tmp_path / "exits" / f"{task.leader_pid}.exit") == 3


def test_a_dead_factory_is_replaced_at_the_next_task(tmp_path):
    first = start(["true"], tmp_path)
    first.confirm(recorded=True)
    asyncio.run(first.wait())
    old = leader_factory().pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    assert wait_until(lambda: leader_factory().pid is None)
    second = start(["sleep", "30"], tmp_path)
    try:
        assert factory_pid(second.leader_pid) not in (old, os.getpid())
    finally:
        second.confirm(recorded=False)
    assert asyncio.run(second.wait()) == -signal.SIGKILL


def test_a_leader_that_cannot_enter_its_cgroup_fails_the_task_with_the_reason(tmp_path):
    missing = tmp_path / "no-such-cgroup"
    with pytest.raises(TaskStartFailed, match=f"cannot start the task in cgroup {missing}: No such file"):
        start(["true"], tmp_path, cgroup_leaves=[missing])


def test_leaders_outlive_an_agent_killed_outright_and_its_factory_exits(tmp_path):
    # The "agent": a process that starts a task through its factory, says who is who, and is SIGKILLed.
    script = textwrap.dedent(f"""
        import asyncio, json, subprocess, sys, time
        from pathlib import Path
        from corral.agent.leaders import begin_task, leader_factory
        starting = begin_task(["sleep", "30"], cwd="/", env={ENV!r}, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, user=None,
                              exit_dir=Path({str(tmp_path)!r}))
        task = asyncio.run(starting.result())
        task.confirm(recorded=True)
        print(json.dumps({{"task": task.pid, "leader": task.leader_pid,
                           "factory": leader_factory().pid}}), flush=True)
        time.sleep(60)
    """)
    agent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    pids = json.loads(agent.stdout.readline())
    agent.kill()
    agent.wait()
    try:
        assert wait_until(lambda: not alive(pids["factory"]))  # its socket closed: it exits
        assert alive(pids["leader"]) and alive(pids["task"])
    finally:
        os.kill(pids["leader"], signal.SIGKILL)  # and its task with it (parent-death signal)
    assert wait_until(lambda: not alive(pids["task"]))
