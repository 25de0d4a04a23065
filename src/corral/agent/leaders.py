"""The agent's side of task leaders (task_leader.py): start a task through its leader, and await a task's
end, whether this agent started its leader or adopted it from an earlier agent (decision 0015).

The leader is the task's parent, so it alone can learn the task's exit status; it writes it to the
task's exit file in the spool, then exits. The agent therefore awaits the leader (through a pidfd, which
works for another's process too) and then reads the exit file. A leader gone without an exit file was
killed, and its task with it (its parent-death signal is SIGKILL).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil

from corral.agent.task_spool import START_TIME_TOLERANCE_S, since_boot

log = logging.getLogger(__name__)

LEADER_SCRIPT = Path(__file__).with_name("task_leader.py")
EXIT_SUFFIX = ".exit"
POLL_S = 0.1  # without pidfds: how often to look whether a leader is gone


class TaskStartFailed(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(eq=False, slots=True)
class TaskProcess:
    """One task: its main process (`pid`, leader of its own session and process group) and its leader."""

    pid: int
    leader_pid: int
    exit_file: Path
    leader: subprocess.Popen[bytes] | None = None  # our child; None for a leader adopted from an earlier agent
    leader_started: float = 0.0  # since boot; how an adopted leader is told from a later process with its pid
    confirm_fd: int | None = None  # our end of the spec pipe, until `confirm`
    fenced: str | None = None  # after `wait`: why the leader killed the task (it lost contact: decision 0017)

    def confirm(self, recorded: bool) -> None:
        """Tell the leader whether the task is recorded in the spool; if not, it kills the task."""
        fd, self.confirm_fd = self.confirm_fd, None
        if fd is None:
            return
        try:
            if recorded:
                os.write(fd, b"ok")
        except OSError:
            pass  # the leader is gone: so is its task
        finally:
            os.close(fd)

    async def wait(self) -> int:
        """The task's exit status as Popen gives it (negative: killed by that signal), once its leader is gone."""
        leader = self.leader
        if leader is not None:
            await _until_gone(self.leader_pid, lambda: leader.poll() is not None)
        else:
            await _until_gone(self.leader_pid, lambda: not same_process(self.leader_pid, self.leader_started))
        record = read_exit_record(self.exit_file)
        returncode = record.get("returncode")
        fenced = record.get("fenced")
        self.fenced = fenced if isinstance(fenced, str) else None
        if not isinstance(returncode, int):
            log.warning("the leader of task %d ended without recording its exit: it was killed, and the task "
                        "with it", self.pid)
            return -signal.SIGKILL
        return returncode

    def forget(self) -> None:
        self.exit_file.unlink(missing_ok=True)


def exit_file(directory: Path, leader_pid: int) -> Path:
    return directory / f"{leader_pid}{EXIT_SUFFIX}"


def forget_exits(directory: Path, keep: set[int]) -> None:
    """Remove the exit files of leaders other than `keep` (those of tasks killed because they could not be
    adopted, or swept when a cluster stopped)."""
    for path in directory.glob(f"*{EXIT_SUFFIX}"):
        if not path.stem.isdigit() or int(path.stem) not in keep:
            path.unlink(missing_ok=True)


def read_exit(path: Path) -> int | None:
    """The returncode a leader recorded, or None if it recorded none."""
    returncode = read_exit_record(path).get("returncode")
    return returncode if isinstance(returncode, int) else None


def read_exit_record(path: Path) -> dict[str, Any]:
    """What a leader recorded: {"returncode": N} (and "fenced": why, if it fenced), or {} if nothing."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def same_process(pid: int, started: float) -> bool:
    """Whether `pid` still is the live process that started at `started` (not a zombie, not a reuse)."""
    try:
        proc = psutil.Process(pid)
        return (abs(since_boot(proc) - started) <= START_TIME_TOLERANCE_S
                and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


async def _until_gone(pid: int, gone: Callable[[], bool]) -> None:
    """Until `gone()`: woken by the pid's pidfd (or by polling without one)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while not gone():
            if pidfd is None:
                await asyncio.sleep(POLL_S)
                continue
            loop = asyncio.get_running_loop()
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(pidfd, _set_done, readable)
            try:
                # Bounded: a zombie leader makes the pidfd readable without `gone()` turning true at once.
                await asyncio.wait_for(readable, 1.0)
            except TimeoutError:
                pass
            finally:
                loop.remove_reader(pidfd)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(eq=False, slots=True)
class StartingTask:
    """A leader started, its task's pid not known yet: several leaders start side by side (each takes
    tens of milliseconds to start Python) before the agent reads their replies."""

    leader: subprocess.Popen[bytes]
    reply_fd: int
    spec_fd: int  # open until the task is confirmed (TaskProcess.confirm)
    exit_file: Path

    async def result(self) -> TaskProcess:
        """The started task; TaskStartFailed with the shell's exit code if it could not start. The event loop
        runs on while the leader starts."""
        reply = await _read_reply(self.reply_fd)
        if "pid" in reply:
            return TaskProcess(pid=int(reply["pid"]), leader_pid=self.leader.pid, exit_file=self.exit_file,
                               leader=self.leader, confirm_fd=self.spec_fd)
        os.close(self.spec_fd)
        self.leader.wait()
        self.exit_file.unlink(missing_ok=True)
        raise TaskStartFailed(str(reply.get("error", "the task's leader failed")), int(reply.get("exit_code", 1)))


def begin_task(argv: list[str], *, cwd: str, env: Mapping[str, str], stdin: int | IO[Any] | None,
               stdout: int | IO[Any] | None, stderr: int | IO[Any] | None, user: tuple[int, int, list[int]] | None,
               exit_dir: Path, placement: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
               contact_file: Path | None = None, cgroup_leaf: Path | None = None) -> StartingTask:
    """Start a task's leader and hand it the task's spec. `placement` is held while the leader is forked
    (the cgroup the leader and its task start in). `contact_file`: the agent's contact, which the leader
    watches to fence (contact.py); `cgroup_leaf`: the task's leaf in the tracking hierarchy, whose
    processes it kills then."""
    exit_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    spec_read, spec_write = os.pipe2(os.O_CLOEXEC)
    reply_read, reply_write = os.pipe2(os.O_CLOEXEC)
    try:
        with placement():
            leader = subprocess.Popen(
                [sys.executable, "-I", "-S", str(LEADER_SCRIPT), str(spec_read), str(reply_write)],
                stdin=stdin, stdout=stdout, stderr=stderr, pass_fds=(spec_read, reply_write), cwd="/",
                start_new_session=True,  # outlives the agent, and no signal to the agent's group reaches it
            )
    except BaseException:
        os.close(spec_write)
        os.close(reply_read)
        raise
    finally:
        os.close(spec_read)
        os.close(reply_write)
    path = exit_file(exit_dir, leader.pid)
    spec = {"argv": argv, "cwd": cwd, "env": dict(env), "user": user, "exit_file": str(path),
            "contact_file": None if contact_file is None else str(contact_file),
            "cgroup_leaf": None if cgroup_leaf is None else str(cgroup_leaf)}
    try:
        _write_all(spec_write, json.dumps(spec).encode() + b"\n")
    except OSError:
        pass  # the leader died before reading: its missing reply says so
    return StartingTask(leader, reply_read, spec_write, path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


async def _read_reply(fd: int) -> dict[str, Any]:
    chunks = []
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    try:
        while True:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                readable: asyncio.Future[None] = loop.create_future()
                loop.add_reader(fd, _set_done, readable)
                try:
                    await readable
                finally:
                    loop.remove_reader(fd)
                continue
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        reply = json.loads(b"".join(chunks))
    except ValueError:
        return {"error": "the task's leader exited before starting the task (see the agent's log)", "exit_code": 1}
    return reply if isinstance(reply, dict) else {"error": "the task's leader replied nonsense", "exit_code": 1}
