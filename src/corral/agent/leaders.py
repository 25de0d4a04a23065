"""The agent's side of task leaders (task_leader.c): start a task through its leader, and await a task's
end, whether this agent started its leader or adopted it from an earlier agent (decision 0015).

Leaders are native (`corral-task-leader`, decision 0022), forked by the agent's leader factory (the same
program run as `corral-task-leader --factory SOCKET_FD`, a child of the agent; `LeaderFactory` is the
agent's side), not by the agent, so that they are not the threaded agent's children. The agent writes
each leader its spec (`encode_spec`) on a pipe. The leader is the task's parent, so it alone can learn the
task's exit status; it writes it to the task's exit file in the spool, then exits. The agent therefore
awaits the leader (through a pidfd, which works for a process that is not its child) and then reads the
exit file. A leader gone without an exit file was killed, and its task with it (its parent-death signal is SIGKILL).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from corral.agent.task_spool import START_TIME_TOLERANCE_S, process_state

log = logging.getLogger(__name__)

LEADER_PROGRAM = Path(__file__).with_name("corral-task-leader")  # built from task_leader.c by `make venv`
FACTORY_FLAG = "--factory"
EXIT_SUFFIX = ".exit"
POLL_S = 0.1  # without pidfds: how often to look whether a leader is gone
REPLY_MAX_BYTES = 4096
FACTORY_EXIT_WAIT_S = 5.0
GONE_STATES = ("Z", "X")  # a zombie, or dead: the process has ended


class TaskStartFailed(Exception):
    """`own`: the leader failed for a reason of the agent's own (its cgroups, the leader itself), not the
    task's command."""

    def __init__(self, message: str, exit_code: int, own: bool = False) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.own = own


@dataclass(eq=False, slots=True)
class TaskProcess:
    """One task: its main process (`pid`, leader of its own session and process group) and its leader."""

    pid: int
    leader_pid: int
    exit_file: Path
    leader_started: float = 0.0  # since boot; how the leader is told from a later process with its pid
    confirm_fd: int | None = None  # our end of the spec pipe, until `confirm`
    fenced: str | None = None  # after `wait`: why the leader killed the task (an earlier version's: decision 0017)
    unrecorded: bool = False  # after `wait`: the leader died without recording the task's exit (it was killed)

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
        await _until_gone(self.leader_pid, lambda: not same_process(self.leader_pid, self.leader_started))
        record = read_exit_record(self.exit_file)
        returncode = record.get("returncode")
        fenced = record.get("fenced")
        self.fenced = fenced if isinstance(fenced, str) else None
        if not isinstance(returncode, int):
            self.unrecorded = True
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
    state = process_state(pid)
    return state is not None and abs(state[0] - started) <= START_TIME_TOLERANCE_S and state[1] not in GONE_STATES


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
            try:
                # Bounded: a zombie leader makes the pidfd readable without `gone()` turning true at once.
                await fd_readable(pidfd, timeout_s=1.0)
            except TimeoutError:
                pass
    finally:
        if pidfd is not None:
            os.close(pidfd)


async def fd_readable(fd: int, timeout_s: float | None = None) -> None:
    """Until `fd` (non-blocking, or a pidfd) can be read, through the event loop; TimeoutError after
    `timeout_s` (None: no limit)."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, _set_done, readable)
    try:
        await asyncio.wait_for(readable, timeout_s)
    finally:
        loop.remove_reader(fd)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(eq=False, slots=True)
class StartingTask:
    """A leader started, its task's pid not known yet: several leaders start side by side before the agent
    reads their replies."""

    leader_pid: int
    leader_started: float
    reply_fd: int
    spec_fd: int  # open until the task is confirmed (TaskProcess.confirm)
    exit_file: Path

    async def result(self) -> TaskProcess:
        """The started task; TaskStartFailed with the shell's exit code if it could not start. The event loop
        runs on while the leader starts."""
        reply = await _read_reply(self.reply_fd)
        if "pid" in reply:
            return TaskProcess(pid=int(reply["pid"]), leader_pid=self.leader_pid, exit_file=self.exit_file,
                               leader_started=self.leader_started, confirm_fd=self.spec_fd)
        os.close(self.spec_fd)  # the leader exits on its own (the factory reaps it)
        self.exit_file.unlink(missing_ok=True)
        raise TaskStartFailed(str(reply.get("error", "the task's leader failed")), int(reply.get("exit_code", 1)),
                              own=reply.get("own") is True)


class LeaderFactory:
    """The agent's side of the leader factory (`corral-task-leader --factory`, task_leader.c): started at the
    first task, asked for a leader per task; started again if it died. One per agent process
    (`leader_factory()`). A request is the cgroup.procs paths ("COUNT\\0" then each path and a NUL) with the
    leader's five descriptors (SCM_RIGHTS); the reply {"pid": N, "started": S} or {"error": ...}."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one request and its reply at a time
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None

    @property
    def pid(self) -> int | None:
        """The factory process's pid while it runs (None before the first task)."""
        return None if self._process is None or self._process.poll() is not None else self._process.pid

    def fork_leader(self, fds: Sequence[int], cgroup_procs: Sequence[Path]) -> tuple[int, float]:
        """A new leader holding (copies of) `fds`, in the cgroups of `cgroup_procs`: its pid and its start
        (seconds since boot). OSError if the factory cannot make one."""
        fields = (str(len(cgroup_procs)).encode(), *map(os.fsencode, cgroup_procs))
        request = b"".join(field + b"\0" for field in fields)
        with self._lock:
            reply = b""
            for _ in range(2):  # a factory found dead is started again, once
                sock = self._running()
                try:
                    socket.send_fds(sock, [request], list(fds))
                    reply = sock.recv(REPLY_MAX_BYTES)
                except OSError:
                    reply = b""
                if reply:
                    break
                log.warning("the task leader factory is gone: starting another")
                self.close()
        if not reply:
            raise OSError("the task leader factory exits at once (see the agent's log)")
        answer = json.loads(reply)
        if "pid" not in answer:
            raise OSError(str(answer.get("error", "the task leader factory failed")))
        return int(answer["pid"]), float(answer.get("started", 0.0))

    def _running(self) -> socket.socket:
        if self._process is not None and self._process.poll() is None and self._socket is not None:
            return self._socket
        self.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [str(LEADER_PROGRAM), FACTORY_FLAG, str(theirs.fileno())],
                stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), cwd="/",
                start_new_session=True,  # no signal to the agent's process group reaches it, nor its leaders
            )
        except OSError as exc:
            ours.close()
            hint = " (build it: make venv)" if isinstance(exc, FileNotFoundError) else ""
            raise OSError(f"cannot start the task leader {LEADER_PROGRAM}: {exc.strerror or exc}{hint}") from exc
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._socket = ours
        return ours

    def close(self) -> None:
        """Let the factory go (it exits when its socket closes); its leaders run on."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._process is not None:
            try:
                self._process.wait(FACTORY_EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None


_factory: tuple[int, LeaderFactory] | None = None


def leader_factory() -> LeaderFactory:
    """This process's leader factory (a child forked from a process that had one makes its own)."""
    global _factory
    if _factory is None or _factory[0] != os.getpid():
        _factory = (os.getpid(), LeaderFactory())
    return _factory[1]


def begin_task(argv: list[str], *, cwd: str, env: Mapping[str, str], stdin: int | IO[Any] | None,
               stdout: int | IO[Any] | None, stderr: int | IO[Any] | None, user: tuple[int, int, list[int]] | None,
               exit_dir: Path, cgroup_leaves: Sequence[Path] = (), contact_file: Path | None = None,
               cgroup_leaf: Path | None = None, controlling_terminal: bool = False) -> StartingTask:
    """Start a task's leader and hand it the task's spec. The leader enters `cgroup_leaves` (one per
    hierarchy) before anything else, so the task starts there. `contact_file`: the agent's contact, which
    the leader watches to fence (contact.py); `cgroup_leaf`: the task's leaf in the tracking hierarchy,
    whose processes it kills then. Streams as Popen takes them (None: the agent's own; DEVNULL).
    `controlling_terminal`: stdin is a pseudo-terminal that becomes the task's controlling terminal."""
    if not exit_dir.is_dir():  # one stat per task, where mkdir would fail and raise on all but the first
        exit_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    spec_fields = encode_spec(argv, cwd=cwd, env=env, user=user, contact_file=contact_file,
                              cgroup_leaf=cgroup_leaf, controlling_terminal=controlling_terminal)
    spec_read, spec_write = os.pipe2(os.O_CLOEXEC)
    reply_read, reply_write = os.pipe2(os.O_CLOEXEC)
    try:
        with _stream_fds((stdin, stdout, stderr)) as streams:
            leader_pid, leader_started = leader_factory().fork_leader(
                [*streams, spec_read, reply_write], [leaf / "cgroup.procs" for leaf in cgroup_leaves])
    except BaseException:
        os.close(spec_write)
        os.close(reply_read)
        raise
    finally:
        os.close(spec_read)
        os.close(reply_write)
    path = exit_file(exit_dir, leader_pid)
    spec = _with_exit_file(spec_fields, path)
    try:
        _write_all(spec_write, spec)
    except OSError:
        pass  # the leader died before reading: its missing reply says so
    return StartingTask(leader_pid, leader_started, reply_read, spec_write, path)


def encode_spec(argv: Sequence[str], *, cwd: str, env: Mapping[str, str], user: tuple[int, int, list[int]] | None,
                contact_file: Path | None, cgroup_leaf: Path | None, controlling_terminal: bool) -> list[bytes]:
    """The spec's fields but the exit file (named after the leader's pid), as the native leader reads them
    (task_leader.c: argv, env, cwd, user, exit file, contact file, cgroup leaf, terminal; each ends in NUL).
    ValueError for what no process can be given: a NUL byte, a variable name with "=", no program."""
    if not argv:
        raise ValueError("no program to run")
    for name in env:
        if not name or "=" in name:
            raise ValueError(f"illegal environment variable name {name!r}")
    fields = [str(len(argv)), *argv, str(len(env)), *(f"{name}={value}" for name, value in env.items()), cwd,
              "" if user is None else " ".join(map(str, (user[0], user[1], *user[2])))]
    if any("\0" in field for field in fields):
        raise ValueError("embedded null byte")
    # One encoding of all fields (as os.fsencode each: the file system's encoding, surrogateescape), split
    # again at the NULs, which no field holds.
    encoded = "\0".join(fields).encode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()).split(b"\0")
    return [*encoded, os.fsencode(contact_file or ""), os.fsencode(cgroup_leaf or ""),
            b"1" if controlling_terminal else b"0"]


def _with_exit_file(fields: list[bytes], path: Path) -> bytes:
    """The spec as written to the leader: its length, a newline, then the NUL-terminated fields."""
    head, tail = fields[:-3], fields[-3:]
    body = b"".join(field + b"\0" for field in (*head, os.fsencode(path), *tail))
    return str(len(body)).encode() + b"\n" + body


@contextlib.contextmanager
def _stream_fds(targets: Sequence[int | IO[Any] | None]) -> Iterator[list[int]]:
    """The fds of Popen-style stream targets, for the duration (DEVNULL opens /dev/null)."""
    opened: list[int] = []
    fds = []
    try:
        for number, target in enumerate(targets):
            if target is None:
                fds.append(number)
            elif target == subprocess.DEVNULL:
                opened.append(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))
                fds.append(opened[-1])
            elif isinstance(target, int):
                if target < 0:
                    raise ValueError(f"unsupported stream target {target} for a task")
                fds.append(target)
            else:
                fds.append(target.fileno())
        yield fds
    finally:
        for fd in opened:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


async def _read_reply(fd: int) -> dict[str, Any]:
    chunks = []
    os.set_blocking(fd, False)
    try:
        while True:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                await fd_readable(fd)
                continue
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        reply = json.loads(b"".join(chunks))
    except ValueError:
        return {"error": "the task's leader exited before starting the task (see the agent's log)", "exit_code": 1,
                "own": True}
    return reply if isinstance(reply, dict) else {"error": "the task's leader replied nonsense", "exit_code": 1,
                                                  "own": True}
