"""Checks: one interface for what the agent asks of a node or a replica: "are you well?" (issue 22).

A `Check` answers `CheckResult(ok, detail)` and never raises: an HTTP GET (2xx and 3xx pass, as in
Kubernetes), a TCP connect, or a program run (exit 0 passes). Each is bounded by its own `timeout_s`; a
program that overruns is SIGKILLed with its whole process group. The node's health-check program
(health.py) and a service replica's probes (probes.py) are both checks, run by the same loop (`every`).

A program runs through a `Launcher`: as the agent (the operator's health-check program), or as a job's
user inside the job's cgroup, started by a task leader exactly like the job's tasks (`TaskLauncher`), so
an exec probe has the replica's user, limits and view of the node, and nothing more.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

from corral.agent.identity import TaskIdentity
from corral.agent.leaders import TaskProcess, TaskStartFailed, begin_task, fd_readable

log = logging.getLogger(__name__)

DETAIL_MAX_CHARS = 200  # a detail is one line people read (a history line, a drain reason)
OUTPUT_KEPT_BYTES = 4096  # of a program's output: enough for its first and last lines


@dataclass(frozen=True, slots=True)
class CheckResult:
    ok: bool
    detail: str = ""  # why it failed ("HTTP 500", "connection refused", "exit 3: ..."), or what passed


class Check(Protocol):
    async def check(self) -> CheckResult: ...


def clip(text: str, limit: int = DETAIL_MAX_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def timed_out(timeout_s: float) -> str:
    return f"timed out after {timeout_s:g} s"


def _connect_error(exc: BaseException) -> str:
    """An OSError's reason as people say it ("connection refused"), from the first cause that has an errno."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None:
            return os.strerror(seen.errno).lower()
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__


class HttpCheck:
    """GET `url`: passes on a status from 200 to 399. `client` must carry no credential of the agent's:
    the replica is the user's program."""

    def __init__(self, url: str, timeout_s: float, client: httpx.AsyncClient) -> None:
        self.url, self.timeout_s, self._client = url, timeout_s, client

    async def check(self) -> CheckResult:
        try:
            response = await self._client.get(self.url, timeout=self.timeout_s)
        except httpx.TimeoutException:
            return CheckResult(False, timed_out(self.timeout_s))
        except httpx.HTTPError as exc:
            return CheckResult(False, clip(_connect_error(exc)))
        return CheckResult(200 <= response.status_code < 400, f"HTTP {response.status_code}")


class TcpCheck:
    """Connect to `host`:`port`: passes when the connection is accepted (it is closed at once)."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s

    async def check(self) -> CheckResult:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), self.timeout_s)
        except TimeoutError:
            return CheckResult(False, timed_out(self.timeout_s))
        except OSError as exc:
            return CheckResult(False, clip(_connect_error(exc)))
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass
        return CheckResult(True, f"connected to port {self.port}")


# -- programs


class Running(Protocol):
    """A program started by a Launcher: the leader of its own process group."""

    pid: int

    async def wait(self) -> int: ...  # its returncode as Popen gives it (negative: killed by that signal)


class Launcher(Protocol):
    async def start(self, argv: Sequence[str], stdout: int, stderr: int) -> Running: ...


class ProgramUnstartable(Exception):
    pass


@dataclass(frozen=True, slots=True)
class ProgramRun:
    """How one run of a program went: its returncode (None: it overran its timeout and was killed)."""

    returncode: int | None
    stdout: bytes
    stderr: bytes


async def run_bounded(launcher: Launcher, argv: Sequence[str], timeout_s: float, *,
                      merge_output: bool = False) -> ProgramRun:
    """Run `argv` through `launcher`, killing its process group if it overruns `timeout_s`. Its output is
    read while it runs (a chatty program never blocks on a full pipe); the first OUTPUT_KEPT_BYTES and last
    OUTPUT_KEPT_BYTES of each stream are kept. ProgramUnstartable if it could not start."""
    out_read, out_write = os.pipe2(os.O_CLOEXEC)
    err_read, err_write = (out_read, out_write) if merge_output else os.pipe2(os.O_CLOEXEC)
    reads = [out_read] if merge_output else [out_read, err_read]
    try:
        running = await launcher.start(argv, out_write, err_write)
    except ProgramUnstartable:
        for fd in {out_read, out_write, err_read, err_write}:
            os.close(fd)
        raise
    for fd in {out_write, err_write}:
        os.close(fd)  # the program holds its copies: ours would keep the pipes open after it exits
    drains = [asyncio.create_task(_drain(fd)) for fd in reads]
    exited = asyncio.ensure_future(running.wait())
    try:
        finished, _ = await asyncio.wait({exited}, timeout=timeout_s)
        _kill_group(running.pid)  # whatever it left behind goes with it, whether it overran or not
        returncode = exited.result() if finished else None
        await exited
        # A grandchild that left the group may still hold the pipes: what came so far is the output.
        done, _ = await asyncio.wait(drains, timeout=0.5)
    finally:
        for task in [*drains, exited]:
            task.cancel()  # only matters when this run itself is cancelled
        await asyncio.gather(*drains, exited, return_exceptions=True)
        for fd in reads:
            os.close(fd)
    outputs = [drain.result() if drain in done and not drain.cancelled() else b"" for drain in drains]
    return ProgramRun(returncode, outputs[0], outputs[0] if merge_output else outputs[1])


async def _drain(fd: int) -> bytes:
    os.set_blocking(fd, False)
    head, tail = bytearray(), bytearray()
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            await fd_readable(fd)
            continue
        if not chunk:
            return bytes(head + tail)
        room = OUTPUT_KEPT_BYTES - len(head)
        head += chunk[:room]
        tail = (tail + chunk[room:])[-OUTPUT_KEPT_BYTES:]




def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def lines_of(output: bytes) -> list[str]:
    return [line.strip() for line in output.decode(errors="replace").splitlines() if line.strip()]


class ExecCheck:
    """Run a program: passes when it exits 0. Fails with "exit 3: <first line of its stderr>" (of its
    stdout when stderr is empty), "killed by signal 9", or "timed out after 1 s"."""

    def __init__(self, argv: Sequence[str], timeout_s: float, launcher: Launcher) -> None:
        self.argv, self.timeout_s, self._launcher = list(argv), timeout_s, launcher

    async def check(self) -> CheckResult:
        try:
            run = await run_bounded(self._launcher, self.argv, self.timeout_s)
        except ProgramUnstartable as exc:
            return CheckResult(False, clip(f"cannot run {self.argv[0]}: {exc}"))
        if run.returncode is None:
            return CheckResult(False, timed_out(self.timeout_s))
        if run.returncode < 0:
            return CheckResult(False, f"killed by signal {-run.returncode}")
        said = lines_of(run.stderr) or lines_of(run.stdout)
        if run.returncode == 0:
            return CheckResult(True, clip(f"exit 0: {said[0]}" if said else "exit 0"))
        return CheckResult(False, clip(f"exit {run.returncode}: {said[0]}" if said else f"exit {run.returncode}"))


# -- launchers


class _AsyncioProcess:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.pid = process.pid
        self._process = process

    async def wait(self) -> int:
        return await self._process.wait()


class AgentLauncher:
    """Programs run as the agent, in a session of their own, with `env` (the node's operator's programs)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = dict(env)

    async def start(self, argv: Sequence[str], stdout: int, stderr: int) -> Running:
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=self._env,
                start_new_session=True)
        except OSError as exc:
            raise ProgramUnstartable(exc.strerror or str(exc)) from exc
        return _AsyncioProcess(process)


class _LedProcess:
    """A program started by a task leader: the leader is awaited, its record read, then forgotten."""

    def __init__(self, process: TaskProcess) -> None:
        self.pid = process.pid
        self._process = process

    async def wait(self) -> int:
        returncode = await self._process.wait()
        self._process.forget()
        return returncode


@dataclass(frozen=True, slots=True)
class TaskContext:
    """Where and as whom a job's tasks run on this node: what a program run "inside the job" needs."""

    identity: TaskIdentity | None  # None: as the agent (an agent that cannot switch users)
    cgroup_leaves: tuple[Path, ...]  # one per hierarchy; empty without cgroups
    cwd: str
    env: Mapping[str, str]


class TaskLauncher:
    """Programs run as a job's tasks are: by a task leader, as the job's user, in the job's cgroup
    (leaders.py). `exit_dir` holds the leaders' exit records while they run."""

    def __init__(self, context: Callable[[], TaskContext], exit_dir: Path) -> None:
        self._context = context  # read at each start: the tasks' cgroup may appear after the launch
        self._exit_dir = exit_dir

    async def start(self, argv: Sequence[str], stdout: int, stderr: int) -> Running:
        context = self._context()
        user = None if context.identity is None else (
            context.identity.uid, context.identity.gid, list(context.identity.groups))
        try:
            starting = begin_task(list(argv), cwd=context.cwd, env=context.env, stdin=subprocess.DEVNULL,
                                  stdout=stdout, stderr=stderr, user=user, exit_dir=self._exit_dir,
                                  cgroup_leaves=context.cgroup_leaves)
            process = await starting.result()
        except TaskStartFailed as exc:
            raise ProgramUnstartable(str(exc)) from exc
        except OSError as exc:
            raise ProgramUnstartable(exc.strerror or str(exc)) from exc
        except ValueError as exc:  # a NUL byte in an argument
            raise ProgramUnstartable(str(exc)) from exc
        process.confirm(recorded=True)  # a probe is no task of the spool's: the leader must not wait for one
        return _LedProcess(process)


# -- the loop


async def every(check: Check, period_s: float, observe: Callable[[CheckResult], bool], *,
                initial_delay_s: float = 0.0) -> None:
    """Run `check` after `initial_delay_s`, then every `period_s` (from one start to the next; a check
    that overruns its period is followed at once), handing each result to `observe`, until `observe`
    returns False (or the task is cancelled). A bug in a check is logged and counts as a failure."""
    loop = asyncio.get_running_loop()
    if initial_delay_s > 0:
        await asyncio.sleep(initial_delay_s)
    while True:
        started = loop.time()
        try:
            result = await check.check()
        except Exception as exc:  # noqa: BLE001 - a bug in a check must not end the loop that runs it
            log.exception("a check failed unexpectedly")
            result = CheckResult(False, clip(f"the check failed: {exc}"))
        if not observe(result):
            return
        await asyncio.sleep(max(0.0, started + period_s - loop.time()))

