"""Runs this node's tasks of a job step (srun inside an allocation) and carries their I/O to srun.

The wire protocol is corral.stepio's. In order:

- Connect to srun's listener (`io_host:io_port`, a few quick retries) and send the hello, before starting
  anything: if srun cannot be reached the step starts nothing and ends with `error` set (a step whose
  srun is gone is of no use to anybody). Without `io_host` (no srun listening) the tasks' streams go to
  their files or nowhere.
- Start the tasks, each its own process group (LocalTasks: the job runner's rules for signals, leftover
  processes and start failures, 127/126/1). stdout and stderr are pipes that the agent reads and sends
  as `o`/`e` frames, or files when `output`/`error` are set (Slurm's patterns with the step's meaning of
  %s, %J, %n; with only `output`, stderr goes to the same file). The tasks `input` selects get a stdin
  pipe fed by srun's `i` frames and closed by its `c` frame; the others read /dev/null.
- A task's `x` frame goes once its process exited and both its pipes reached end of file, so all its
  output is ahead of it (the wait for end of file is bounded: something that escaped the task's process
  group may hold a pipe open for ever). After the last one the agent half-closes the connection, lets
  srun close its end, and the runner yields StepFinished.
- srun --pty: task 0's stdin, stdout and stderr are one pseudo-terminal, its controlling terminal
  (terminals.py); its master end is read as task 0's stdout and written with srun's `i` frames, and `w`
  frames set its window size. The other tasks get /dev/null, as in Slurm. An agent restarted while such a
  step runs cannot relay it any more: the master end closed with the earlier agent, so the terminal hung
  up and its shell got SIGHUP (the step ends, its exit reported as for any adopted step).
- sattach: `attach()` connects to one more listener, which gets the output from then on and every exit,
  and may send stdin, signals and window sizes; its end only detaches it (step_attachments.py).
- If srun's connection drops while tasks run, the tasks get SIGTERM, then SIGKILL after
  LOST_SRUN_GRACE_S (Slurm kills a step whose srun is gone), and StepFinished carries the error.
- Unlike a batch job's, a step's tasks depend on the agent while their output flows through it.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import subprocess
from collections import deque
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from corral import kill_reasons, stepio
from corral.agent.environment import output_path, step_environment
from corral.agent.leaders import StartingTask, TaskProcess
from corral.agent.step_attachments import Attachments
from corral.agent.task_spool import TaskRecord, TaskSpool
from corral.agent.tasks import (
    DEVELOPMENT_MODE,
    EXIT_SPAWN_FAILED,
    Confinement,
    LocalTasks,
    SpawnError,
    StdioTarget,
    append_to,
    check_workdir,
    describe_exits,
    open_output,
    set_done,
)
from corral.agent.terminals import open_terminal, set_window
from corral.protocol import LaunchStep, StepFinished, TaskExit, TaskLaunch

log = logging.getLogger(__name__)

CONNECT_ATTEMPTS = 4
CONNECT_RETRY_S = 0.2
CONNECT_TIMEOUT_S = 3.0
# How long a task's pipes may stay open after its process exited (something escaped its group).
PIPE_DRAIN_S = 2.0
# After the last frame: how long srun gets to close its end before the agent closes the socket.
CLOSE_TIMEOUT_S = 5.0
LOST_SRUN_GRACE_S = 2.0
# Stop reading srun's frames while a task has this much stdin queued (it does not read its stdin).
STDIN_BUFFER_LIMIT = 4 << 20


class StepRunner(LocalTasks):
    """One step's local tasks. `run()` yields one StepFinished when they are all done (or could not
    start); `kill()` (LocalTasks.kill) may be called at any time."""

    def __init__(self, launch: LaunchStep, *, node_name: str, spool_dir: Path, base_env: Mapping[str, str],
                 refusal: str | None = None, confinement: Confinement = DEVELOPMENT_MODE):
        super().__init__(f"step {launch.job_id}.{launch.step_id}",
                         kill_reasons.step_entity(launch.job_id, launch.step_id), node_name,
                         announces=launch.node_index == 0, spool=TaskSpool(spool_dir),
                         job_id=launch.job_id, step_id=launch.step_id, gpus=launch.node_gpus, refusal=refusal,
                         user=launch.user, uid=launch.uid, confinement=confinement, mem_mib=launch.mem_per_node_mib,
                         cpus=launch.cpus_on_node)
        self.launch = launch
        self.job_id = launch.job_id
        self.step_id = launch.step_id
        self._job_dir = Path(spool_dir) / f"job{launch.job_id}"  # the job's on this node (runner.py's)
        self._node_name = node_name
        self._base_env = dict(base_env)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._send_lock = asyncio.Lock()
        self._lost: str | None = None  # why the connection to srun ended early
        self._stdin: dict[int, _StdinPipe] = {}  # rank -> its stdin pipe (tasks that take stdin)
        self._terminal: int | None = None  # srun --pty: task 0's pseudo-terminal (master end)
        self._outputs: dict[int, list[tuple[bytes, int]]] = {}  # rank -> (frame type, read end)
        self._pumps: dict[int, list[asyncio.Task[None]]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._attachments = Attachments(self._what, node_name, [t.rank for t in launch.tasks], self._handle)

    @property
    def key(self) -> tuple[int, int]:
        return (self.job_id, self.step_id)

    def adopt(self, records: list[TaskRecord], launch_json: str) -> None:
        super().adopt(records, launch_json)
        self._adopt_container(self.launch.container, self._job_dir)

    async def run(self) -> AsyncIterator[StepFinished]:
        yield await self._execute()

    async def _execute(self) -> StepFinished:
        if self.adopted:
            return await self._run_on()
        try:
            await self._connect()
        except OSError as exc:
            self._spawn_done.set()
            self._all_exited.set()
            error = f"cannot connect to srun at {self.launch.io_host}:{self.launch.io_port}: {exc}"
            log.warning("%s: %s", self._what, error)
            exits = [TaskExit(rank=t.rank, exit_code=EXIT_SPAWN_FAILED) for t in self.launch.tasks]
            return StepFinished(job_id=self.job_id, step_id=self.step_id, tasks=exits, error=error)
        try:
            try:
                await self._open_container(self.launch.container, self._job_dir)
                self._spawn_all()
                await self._take_replies()
            except SpawnError as exc:
                return await self._abort(exc)
            finally:
                self._spawn_done.set()
            log.info("%s: started %d task(s), pids %s", self._what, len(self._procs), self.pids)
            return await self._supervise()
        finally:
            self._close_container()
            self._close_pipes()
            await self._attachments.close()
            await self._close_connection()

    async def attach(self, host: str, port: int, token: str) -> None:
        """sattach: the step's I/O to this listener too (step_attachments.py), once its tasks started; not
        for an adopted step, whose streams ended with the earlier agent."""
        await self._spawn_done.wait()
        if self.adopted or self._all_exited.is_set():
            log.info("%s: nothing to attach to (%s)", self._what, "adopted" if self.adopted else "ended")
            return
        await self._attachments.attach(host, port, token)

    async def _run_on(self) -> StepFinished:
        """An adopted step: its tasks run on, but their stream to srun ended with the earlier agent (output
        to pipes is lost, and a task writing there gets SIGPIPE); their exits are still reported."""
        log.info("%s: adopted %d task(s) of an earlier agent, pids %s (no I/O to srun any more)", self._what,
                 len(self._procs), self.pids)
        exits = await asyncio.gather(*(self._reap(rank, proc) for rank, proc in self._procs.items()))
        await self._end_cgroup()
        self._close_container()
        log.info("%s: all tasks exited: %s", self._what, describe_exits(sorted(exits, key=lambda e: e.rank)))
        return StepFinished(job_id=self.job_id, step_id=self.step_id, tasks=sorted(exits, key=lambda e: e.rank),
                            oom_killed=self.oom_killed, infrastructure=self.infrastructure)

    async def _supervise(self) -> StepFinished:
        for pipe in self._stdin.values():
            pipe.start()
        for rank, outputs in self._outputs.items():
            self._pumps[rank] = [asyncio.create_task(self._pump(rank, kind, fd)) for kind, fd in outputs]
        self._outputs.clear()  # the pumps own (and close) the read ends now
        reader = asyncio.create_task(self._read_from_srun()) if self._writer is not None else None
        workers = [asyncio.create_task(self._finish_task(rank, proc)) for rank, proc in self._procs.items()]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in [*workers, *(p for pumps in self._pumps.values() for p in pumps)]:
                task.cancel()
            if reader is not None:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
        await self._end_cgroup()
        exits = [self._exits[rank] for rank in sorted(self._exits)]
        log.info("%s: all tasks exited: %s%s", self._what, describe_exits(exits),
                 " (out of memory)" if self.oom_killed else "")
        return StepFinished(job_id=self.job_id, step_id=self.step_id, tasks=exits, error=self._lost,
                            oom_killed=self.oom_killed, infrastructure=self.infrastructure)

    # -- the connection to srun

    async def _connect(self) -> None:
        host, port = self.launch.io_host, self.launch.io_port
        if host is None or port is None:
            return
        failure: Exception | None = None
        for attempt in range(CONNECT_ATTEMPTS):
            if attempt:
                await asyncio.sleep(CONNECT_RETRY_S * attempt)
            try:
                self._reader, self._writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
                break
            except (OSError, TimeoutError) as exc:
                failure = exc
        else:
            raise OSError(_describe(failure) if failure else "no attempt made")
        assert self._writer is not None  # connected: the loop broke out
        ranks = [t.rank for t in self.launch.tasks]
        try:
            self._writer.write(stepio.hello(self.launch.io_token, self._node_name, ranks))
            await self._writer.drain()
        except OSError:
            await self._close_connection()
            raise

    async def _send(self, data: bytes) -> None:
        """One frame to srun and to every attachment (sattach)."""
        await self._send_to_srun(data)
        await self._attachments.send(data)

    async def _send_to_srun(self, data: bytes) -> None:
        """One frame to srun; dropped once the connection is lost (the tasks are being killed then)."""
        if self._writer is None or self._lost is not None:
            return
        async with self._send_lock:
            if self._lost is not None:
                return
            try:
                self._writer.write(data)
                await self._writer.drain()
            except (ConnectionError, OSError, RuntimeError) as exc:
                self._srun_lost(f"connection to srun lost: {_describe(exc)}")

    def _srun_lost(self, reason: str) -> None:
        if self._lost is not None:
            return
        self._lost = reason
        live = self._live_ranks()
        log.warning("%s: %s%s", self._what, reason, f"; killing {len(live)} task(s)" if live else "")
        if live:
            task = asyncio.get_running_loop().create_task(self.kill(signal.SIGTERM, LOST_SRUN_GRACE_S))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _read_from_srun(self) -> None:
        reader = self._reader
        assert reader is not None
        try:
            while True:
                header = await reader.readexactly(stepio.HEADER.size)
                kind, rank, length = stepio.HEADER.unpack(header)
                if length > stepio.MAX_PAYLOAD:
                    raise stepio.ProtocolError(f"frame of {length} bytes")
                payload = await reader.readexactly(length) if length else b""
                await self._handle(kind, rank, payload)
        except asyncio.IncompleteReadError:
            reason = "srun closed the connection"
        except (ConnectionError, OSError) as exc:
            reason = f"connection to srun lost: {_describe(exc)}"
        except (stepio.ProtocolError, ValueError) as exc:
            reason = f"protocol error from srun: {exc}"
        self._srun_lost(reason)

    async def _handle(self, kind: bytes, rank: int, payload: bytes) -> None:
        if kind == stepio.SIGNAL:
            signum = int(payload)
            log.info("%s: srun sends signal %d to %d task group(s)", self._what, signum, len(self._live_ranks()))
            self._signal_live(signum)
        elif kind == stepio.WINDOW:
            if self._terminal is not None:
                set_window(self._terminal, *stepio.parse_window(payload))
        elif kind in (stepio.STDIN, stepio.STDIN_CLOSED):
            pipes = list(self._stdin.values()) if rank == stepio.ALL_RANKS else [self._stdin.get(rank)]
            for pipe in pipes:
                if pipe is None:
                    continue
                if kind == stepio.STDIN_CLOSED:
                    pipe.finish()
                    continue
                pipe.feed(payload)
                await pipe.room()  # backpressure: a task that does not read its stdin slows srun down
        # Unknown frame types are skipped (a newer srun).

    async def _close_connection(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            if self._lost is None and self._reader is not None:
                # Half-close, then read (and drop) whatever srun still sends until it closes: closing with
                # unread data would reset the connection and could destroy our last frames in transit.
                writer.write_eof()
                await writer.drain()
                await asyncio.wait_for(_discard_until_eof(self._reader), CLOSE_TIMEOUT_S)
        except (OSError, RuntimeError, TimeoutError):
            pass
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (OSError, RuntimeError):
                pass

    # -- starting

    def _spawn_all(self) -> None:
        self._prepare()
        self._save_launch(self.launch.model_dump_json())
        launch = self.launch
        check_workdir(launch.workdir, self._identity)
        if not launch.argv:
            raise SpawnError("the step has no command")
        stdin_rank: int | None = None
        if self._writer is not None:
            try:
                stdin_rank = stepio.parse_input(launch.input)
            except ValueError:
                log.warning("%s: input %r is not all, none or a rank: no stdin", self._what, launch.input)
        self._begin_each(
            (task.rank, functools.partial(self._spawn, task, list(launch.argv),
                                          stdin_rank is not None and stdin_rank in (stepio.ALL_RANKS, task.rank)))
            for task in launch.tasks)

    def _spawn(self, task: TaskLaunch, argv: list[str], takes_stdin: bool) -> StartingTask:
        if self.launch.pty:
            return self._spawn_on_terminal(task, argv) if task.rank == 0 else self._spawn_silent(task, argv)
        child_fds: list[int] = []  # the child's ends: closed here whatever happens
        parent_fds: list[int] = []  # ours: kept only if the task starts
        outputs: list[tuple[bytes, int]] = []  # (frame type, read end) of the pipes to srun
        stdin_pipe: int | None = None
        try:
            stdout = self._stream_target(task, self.launch.output, stepio.STDOUT, child_fds, parent_fds, outputs)
            if self.launch.error is None and self.launch.output is not None:
                stderr = stdout  # Slurm: with --output only, stderr goes to the same file
            else:
                stderr = self._stream_target(task, self.launch.error, stepio.STDERR, child_fds, parent_fds,
                                             outputs)
            stdin: StdioTarget = subprocess.DEVNULL
            if takes_stdin:
                stdin, stdin_pipe = os.pipe2(os.O_CLOEXEC)
                child_fds.append(stdin)
                parent_fds.append(stdin_pipe)
            env = step_environment(self.launch, task, self._node_name, self._base_env)
            env.update(self._identity_variables())
            proc = self._spawn_task(argv, cwd=self.launch.workdir, env=env, stdin=stdin, stdout=stdout,
                                    stderr=stderr)
        except BaseException:
            for fd in parent_fds:
                os.close(fd)
            raise
        finally:
            for fd in child_fds:
                os.close(fd)
        if stdin_pipe is not None:
            self._stdin[task.rank] = _StdinPipe(stdin_pipe)
        self._outputs[task.rank] = outputs
        return proc

    def _spawn_on_terminal(self, task: TaskLaunch, argv: list[str]) -> StartingTask:
        """srun --pty's task 0: a pseudo-terminal is its stdin, stdout, stderr and controlling terminal; the
        master end carries srun's keystrokes in and everything the task writes out (as stdout)."""
        owner = self._identity.uid if self._identity is not None else None
        try:
            master, slave = open_terminal(self.launch.pty_rows, self.launch.pty_cols, owner)
        except OSError as exc:
            raise SpawnError(f"cannot open a pseudo-terminal: {exc.strerror or exc}", own=True) from exc
        parent_fds = [master]
        try:
            parent_fds.append(os.dup(master))  # stdin's writer closes its own copy
            parent_fds.append(os.dup(master))  # for window size changes
            env = step_environment(self.launch, task, self._node_name, self._base_env)
            env.update(self._identity_variables())
            env.setdefault("TERM", self.launch.env.get("TERM") or "xterm")
            proc = self._spawn_task(argv, cwd=self.launch.workdir, env=env, stdin=slave, stdout=slave,
                                    stderr=slave, controlling_terminal=True)
        except BaseException:
            for fd in parent_fds:
                os.close(fd)
            raise
        finally:
            os.close(slave)
        self._outputs[task.rank] = [(stepio.STDOUT, master)]
        self._stdin[task.rank] = _StdinPipe(parent_fds[1])
        self._terminal = parent_fds[2]
        return proc

    def _spawn_silent(self, task: TaskLaunch, argv: list[str]) -> StartingTask:
        """srun --pty's other tasks: /dev/null for all three streams, as in Slurm."""
        env = step_environment(self.launch, task, self._node_name, self._base_env)
        env.update(self._identity_variables())
        return self._spawn_task(argv, cwd=self.launch.workdir, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _stream_target(self, task: TaskLaunch, pattern: str | None, kind: bytes, child_fds: list[int],
                       parent_fds: list[int], outputs: list[tuple[bytes, int]]) -> StdioTarget:
        """Where one of the task's output streams goes: a file, a pipe to srun, or nowhere."""
        if pattern is not None:
            fd = open_output(self._output_path(pattern, task), identity=self._identity)
            child_fds.append(fd)
            return fd
        if self._writer is None:
            return subprocess.DEVNULL
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        child_fds.append(write_end)
        parent_fds.append(read_end)
        os.set_blocking(read_end, False)
        outputs.append((kind, read_end))
        return write_end

    def _output_path(self, pattern: str, task: TaskLaunch) -> str:
        return output_path(self.launch, pattern, self._node_name, task.rank)

    async def _write_stderr(self, data: bytes) -> None:
        """Where the first local task's stderr goes: its --error file (--output without --error), or to
        srun as that task's stderr (srun -l labels it), or nowhere."""
        task = self.launch.tasks[0]
        pattern = self.launch.error or self.launch.output
        if pattern is not None:
            append_to(self._output_path(pattern, task), data, self._identity)
        elif self._writer is not None:
            await self._send(stepio.frame(stepio.STDERR, task.rank, data))

    async def _abort(self, exc: SpawnError) -> StepFinished:
        """Kill the tasks started before the failure; report every local task as failed to start."""
        log.warning("%s: cannot start: %s", self._what, exc)
        await self._kill_started()
        self._forget_launch()
        self._close_pipes()
        exits = [TaskExit(rank=t.rank, exit_code=exc.exit_code) for t in self.launch.tasks]
        for exit_ in exits:
            await self._send(stepio.frame(stepio.EXIT, exit_.rank, stepio.exit_payload(exit_.exit_code)))
        await self._send(stepio.frame(stepio.FAILED, stepio.ALL_RANKS, str(exc).encode()))
        return StepFinished(job_id=self.job_id, step_id=self.step_id, tasks=exits, error=str(exc),
                            infrastructure=exc.infrastructure())

    def _close_pipes(self) -> None:
        if self._terminal is not None:
            os.close(self._terminal)
            self._terminal = None
        for pipe in self._stdin.values():
            pipe.close()
        self._stdin.clear()
        for outputs in self._outputs.values():
            for _, fd in outputs:
                os.close(fd)
        self._outputs.clear()

    # -- running

    async def _finish_task(self, rank: int, proc: TaskProcess) -> None:
        exit_ = await self._reap(rank, proc)
        pipe = self._stdin.pop(rank, None)
        if pipe is not None:
            pipe.close()
        pumps = self._pumps.get(rank, [])
        if pumps:
            _, late = await asyncio.wait(pumps, timeout=PIPE_DRAIN_S)
            for pump in late:
                log.warning("%s: task %d exited but its output is still open after %.1fs: dropping the rest",
                            self._what, rank, PIPE_DRAIN_S)
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        await self._send(stepio.frame(stepio.EXIT, rank, stepio.exit_payload(exit_.exit_code, exit_.signal)))

    async def _pump(self, rank: int, kind: bytes, fd: int) -> None:
        """Copy one output pipe of a task to srun until end of file (then close it)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    data = os.read(fd, stepio.CHUNK)
                except BlockingIOError:
                    await _ready(loop, fd, write=False)
                    continue
                except OSError:
                    return
                if not data:
                    return
                await self._send(stepio.frame(kind, rank, data))
        finally:
            os.close(fd)


class _StdinPipe:
    """The write end of one task's stdin: srun's bytes queued and written as the task reads them."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        os.set_blocking(fd, False)
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._eof = False
        self._wakeup = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._write_loop())

    def feed(self, data: bytes) -> None:
        if self._fd is None or self._eof:
            return
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered >= STDIN_BUFFER_LIMIT:
            self._room.clear()
        self._wakeup.set()

    def finish(self) -> None:
        """End of file once what is queued is written."""
        self._eof = True
        self._wakeup.set()

    async def room(self) -> None:
        await self._room.wait()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._chunks.clear()
        self._buffered = 0
        self._room.set()

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                while not self._chunks and not self._eof:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                if not self._chunks:
                    return  # end of file: closing the pipe tells the task
                assert self._fd is not None
                data = self._chunks[0]
                try:
                    written = os.write(self._fd, data)
                except BlockingIOError:
                    await _ready(loop, self._fd, write=True)
                    continue
                except OSError:
                    return  # the task closed its stdin (or exited): the rest is dropped
                if written == len(data):
                    self._chunks.popleft()
                else:
                    self._chunks[0] = data[written:]
                self._buffered -= written
                if self._buffered < STDIN_BUFFER_LIMIT:
                    self._room.set()
        finally:
            self._close_fd()


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, *, write: bool) -> None:
    ready: asyncio.Future[None] = loop.create_future()
    if write:
        loop.add_writer(fd, set_done, ready)
    else:
        loop.add_reader(fd, set_done, ready)
    try:
        await ready
    finally:
        if write:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


async def _discard_until_eof(reader: asyncio.StreamReader) -> None:
    while await reader.read(stepio.CHUNK):
        pass


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
