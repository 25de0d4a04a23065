"""What the job runner and the step runner share: a task is started as its own process group through a
leader of its own (leaders.py), awaited, signalled as a group, and reported as a TaskExit. See runner.py
for why each is so."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from corral import kill_reasons
from corral.agent.cgroup_hierarchies import Unified
from corral.agent.cgroups import CgroupError, CgroupTree, JobCgroup
from corral.agent.container_tasks import ContainerStartError, ContainerSupport, TaskContainer, lease_name
from corral.agent.identity import TaskIdentity, UnknownUser, agent_identity, file_access_as, task_identity
from corral.agent.leaders import StartingTask, TaskProcess, TaskStartFailed, begin_task, exit_file
from corral.agent.task_spool import TaskRecord, TaskSpool
from corral.agent.usage import Tracked
from corral.jobref import ascii_number
from corral.protocol import ContainerLaunch, InfrastructureFailure, TaskExit

log = logging.getLogger(__name__)

EXIT_SPAWN_FAILED = 1
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
OUTPUT_FILE_MODE = 0o644
LEFTOVER_POLL_S = 0.05
# A leader died without recording its task's exit: how long its cgroup leaf may take to go, if someone
# removes it (a sweep kills what is in a cgroup first, then removes it, within milliseconds).
CGROUP_GONE_WAIT_S = 1.0

StdioTarget = int | IO[Any] | None


class SpawnError(Exception):
    """Tasks could not start. `own`: for a reason of the agent's own (its spool, its cgroups, its leader
    factory), not the job's (its command, user, directories, files): an infrastructure failure."""

    def __init__(self, message: str, exit_code: int = EXIT_SPAWN_FAILED, own: bool = False) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.own = own

    def infrastructure(self) -> InfrastructureFailure | None:
        return InfrastructureFailure(kind="start-failed", reason=str(self)) if self.own else None


@dataclass(frozen=True, slots=True)
class Confinement:
    """How this agent confines tasks: as their user (an agent running as root), in cgroups (where the
    host allows). The default is development mode: tasks run as the agent's user, in its cgroup.
    `allow_root_jobs` (--allow-root-jobs): whether a job as root runs here, where tasks run as their user."""

    run_as_user: bool = False
    cgroups: CgroupTree | None = None
    allow_root_jobs: bool = False
    containers: ContainerSupport | None = None  # the node's runtime and image cache (None: no containers)


DEVELOPMENT_MODE = Confinement()


def spawn_task(
    argv: list[str], *, cwd: str, env: Mapping[str, str], stdin: StdioTarget, stdout: StdioTarget,
    stderr: StdioTarget, exit_dir: Path, identity: TaskIdentity | None = None,
    cgroup_leaves: Sequence[Path] = (),
    contact_file: Path | None = None, cgroup_leaf: Path | None = None, controlling_terminal: bool = False,
) -> StartingTask:
    """Start one task in its own session and process group, as `identity` (None: as the agent), through a
    leader of its own that outlives the agent (leaders.py; `LocalTasks._take_replies` takes its reply); a
    failure becomes a SpawnError with the exit code a shell would give (127 not found, 126 not
    executable, 1 anything else). `contact_file`, `cgroup_leaf`: what the leader needs to fence (decision 0017)."""
    user = None if identity is None else (identity.uid, identity.gid, list(identity.groups))
    try:
        return begin_task(argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, user=user,
                          exit_dir=exit_dir, cgroup_leaves=cgroup_leaves, contact_file=contact_file,
                          cgroup_leaf=cgroup_leaf, controlling_terminal=controlling_terminal)
    except OSError as exc:  # the spool, a pipe, the leader factory: the agent's own
        raise SpawnError(f"cannot start {argv[0]}: {exc}", own=True) from exc
    except (ValueError, subprocess.SubprocessError) as exc:
        # ValueError: e.g. a NUL byte in an argument or environment value.
        raise SpawnError(f"cannot start {argv[0]}: {exc}") from exc


def open_output(path: str, truncate: bool = False, identity: TaskIdentity | None = None) -> int:
    """Open (create) a task's output file, with `identity`'s permissions when given."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0)
    try:
        with file_access_as(identity):
            return os.open(path, flags, OUTPUT_FILE_MODE)
    except OSError as exc:
        whom = f" as user {identity.name}" if identity is not None else ""
        raise SpawnError(f"cannot open output file {path}{whom}: {exc.strerror}") from exc


def check_workdir(workdir: str, identity: TaskIdentity | None) -> None:
    """The task's user can enter its working directory (stat through it needs search permission)."""
    try:
        with file_access_as(identity):
            os.stat(os.path.join(workdir, "."))
    except PermissionError:
        whom = identity.name if identity is not None else "the agent's user"
        raise SpawnError(f"working directory {workdir} is not accessible to user {whom}") from None
    except OSError:
        raise SpawnError(f"working directory {workdir} does not exist or is not a directory") from None


def append_to(path: str, data: bytes, identity: TaskIdentity | None = None) -> None:
    fd = open_output(path, identity=identity)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def task_exit(rank: int, returncode: int) -> TaskExit:
    """Popen's returncode (negative for a signal death) as the protocol reports it."""
    if returncode < 0:
        return TaskExit(rank=rank, exit_code=0, signal=-returncode)
    return TaskExit(rank=rank, exit_code=returncode)


def int_or_none(text: str | None) -> int | None:
    """ASCII digits only: int() and str.isdigit() take other scripts' digits too."""
    return None if text is None else ascii_number(text)


def describe_exits(exits: list[TaskExit]) -> str:
    return ", ".join(f"rank {e.rank} {e.exit_code}:{e.signal}" for e in exits)


class LocalTasks:
    """The local tasks of one job or step: their main processes by rank, their exits, and signals to
    their process groups. Subclasses start the processes (`_refuse_if_told` first, `_started` for each),
    then set `_spawn_done`, and await `_reap` for each. Every task is in the spool from its start until the
    controller has its end (`release`; task_spool.py), so that it never outlives the agent unnoticed."""

    def __init__(self, what: str, entity: str, node_name: str, announces: bool, *, spool: TaskSpool,
                 job_id: int, step_id: int | None, gpus: Sequence[int], refusal: str | None = None,
                 user: str = "", uid: int = -1, confinement: Confinement = DEVELOPMENT_MODE, mem_mib: int = 0,
                 cpus: int = 0) -> None:
        self._what = what  # "job 7", "step 7.0": for the log
        self._entity = entity  # "JOB 7", "STEP 7.0": for slurmstepd's closing line
        self._node_name = node_name
        # Only the first node of a job or step writes the closing line, once, as slurmstepd does.
        self._announce_pending = announces
        self._spool = spool
        self._owner = (job_id, step_id, tuple(gpus))
        self._refusal = refusal  # why the agent will not start these tasks at all (their GPUs are busy)
        self._procs: dict[int, TaskProcess] = {}  # rank -> the task's main process (and its leader)
        self._exits: dict[int, TaskExit] = {}
        self._spawn_done = asyncio.Event()
        self._all_exited = asyncio.Event()
        # While a kill's grace runs (loop time it ends): what a dead task left in its group gets until then.
        self._grace_ends: float | None = None
        self._user = user
        self._uid = uid  # the uid the job carries: the node's user database must give `user` the same
        self._confinement = confinement
        self._mem_mib = mem_mib
        self._cpus = cpus  # how many CPUs the job has on this node (the cgroup's cpuset picks which)
        self._identity: TaskIdentity | None = None  # who the tasks run as (None: the agent's user)
        self._cgroup: JobCgroup | None = None
        self._leaf_name = "batch" if step_id is None else f"step_{step_id}"
        self._leaves: list[Path] = []  # one per cgroup hierarchy
        self.oom_killed = False  # the kernel killed one of its processes for going over the memory limit
        self.fenced: str | None = None  # why their leaders killed tasks: lost contact with the controller
        # corral's own machinery failed under them (a leader killed, their cgroup removed): not their own end.
        self.infrastructure: InfrastructureFailure | None = None
        self.adopted = False  # its tasks were started by an earlier agent on this node
        self._launch_json: str | None = None  # the launch message as saved in the spool
        self._starting: list[tuple[int, StartingTask]] = []  # leaders started, their replies not read yet
        self._start_failure: SpawnError | None = None
        self._recorded: set[int] = set()  # ranks whose tasks are in the spool
        self._container: TaskContainer | None = None  # the container the tasks run in (None: on the node)

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs.values()]

    @property
    def identity(self) -> TaskIdentity | None:
        """Who the tasks run as (None: the agent's user), once they started or were adopted."""
        return self._identity

    def cgroup_leaves(self) -> list[Path]:
        """The tasks' cgroup leaves, one per hierarchy (none without cgroups): where a program run inside the
        job goes (a service replica's exec probe)."""
        tree = self._confinement.cgroups
        if tree is None:
            return []
        return list(self._leaves) or [h.root / f"job_{self._owner[0]}" / self._leaf_name for h in tree.hierarchies]

    def tracked(self) -> Tracked:
        """Where its tasks are, for the usage monitor (usage.py)."""
        tree, (job_id, step_id, gpus) = self._confinement.cgroups, self._owner
        memory = tree.memory if tree is not None else None
        v2 = tree.tracker if tree is not None and isinstance(tree.tracker, Unified) else None
        relative = f"job_{job_id}/{self._leaf_name}"
        return Tracked(job_id, step_id, tuple(self.pids), gpus, memory.root / relative if memory else None,
                       isinstance(memory, Unified), v2.root / relative if v2 else None)

    async def kill(self, signum: int, grace_s: float, reason: str | None = None, note: str | None = None) -> None:
        """`signum` to every task's process group, then SIGKILL to those still alive after `grace_s`.

        A negative `grace_s` delivers the signal only (for `scancel --signal`, which must not kill).
        With a `reason` (corral.kill_reasons), slurmstepd's closing line goes to the stderr first, and
        `note` (why a policy stopped the job) after it as `corral: NOTE`.
        """
        await self._spawn_done.wait()
        if reason is not None:
            await self._announce(reason, note)
        log.info("%s: signal %d to %d task group(s), grace %.1fs", self._what, signum,
                 len(self._live_ranks()), grace_s)
        if grace_s >= 0 and signum != signal.SIGKILL and self._grace_ends is None:
            self._grace_ends = asyncio.get_running_loop().time() + grace_s
        self._signal_live(signum)
        if grace_s < 0 or signum == signal.SIGKILL:
            return
        try:
            await asyncio.wait_for(self._all_exited.wait(), timeout=grace_s)
        except TimeoutError:
            log.info("%s: still running after %.1fs, sending SIGKILL", self._what, grace_s)
            self._signal_live(signal.SIGKILL)

    async def exited(self) -> None:
        """Until every task has exited (or none could start)."""
        await self._spawn_done.wait()
        await self._all_exited.wait()

    @property
    def holds_devices(self) -> bool:
        """Whether its tasks may be using their GPUs: about to start, or started and not all exited."""
        return self._refusal is None and not self._all_exited.is_set()

    def refuse(self, reason: str) -> None:
        """Start none of the tasks (called before `run()`): they end at once with `reason` as the error."""
        self._refusal = reason

    def _refuse_if_told(self) -> None:
        if self._refusal is not None:
            raise SpawnError(self._refusal)

    def _prepare(self) -> None:
        """Who the tasks run as, and their cgroup; SpawnError (nothing started) if either is impossible."""
        self._refuse_if_told()
        if self._confinement.run_as_user:
            try:
                self._identity = self._task_identity()
            except UnknownUser as exc:
                raise SpawnError(str(exc)) from None
        tree = self._confinement.cgroups
        if tree is not None:
            self._cgroup = tree.for_job(self._owner[0])
            try:
                self._leaves = self._cgroup.leaf(self._leaf_name, self._mem_mib, self._cpus, self._owner[2])
            except CgroupError as exc:
                raise SpawnError(str(exc), own=True) from None

    def _task_identity(self) -> TaskIdentity:
        return task_identity(self._user, self._uid, self._node_name, self._confinement.allow_root_jobs)

    def _save_launch(self, launch_json: str) -> None:
        """Keep the launch message beside the task records while the tasks run: a restarted agent needs it
        to run on with them (SpawnError if it cannot be kept: nothing was started)."""
        try:
            self._spool.save_launch(self._owner[0], self._owner[1], launch_json)
        except OSError as exc:
            raise SpawnError(f"cannot record the launch in {self._spool.launches}: {exc}", own=True) from exc
        self._launch_json = launch_json

    def _forget_launch(self) -> None:
        if self._launch_json is not None:
            self._spool.forget_launch(self._owner[0], self._owner[1], self._launch_json)

    def release(self) -> None:
        """Forget the tasks' records, recorded exits and launch, once the controller has their end: until
        then a restarted agent finds them and reports that end again (decision 0015)."""
        self._forget_launch()
        for proc in self._procs.values():
            proc.forget()
            self._spool.remove(proc.pid)  # last: a test (or a person) waiting for the records sees all gone

    def adopt(self, records: list[TaskRecord], launch_json: str) -> None:
        """Take over the tasks an earlier agent on this node started (decision 0015): they run on, their
        leaders record how they end, and from now on this agent signals and reports them."""
        if self._confinement.run_as_user:
            try:
                self._identity = self._task_identity()
            except UnknownUser:
                self._announce_pending = False  # no closing line: it must be written as the user
        tree = self._confinement.cgroups
        if tree is not None:
            self._cgroup = tree.for_job(self._owner[0])  # its leaf `_leaf_name` in every hierarchy is theirs
        for record in records:
            self._procs[record.rank] = TaskProcess(pid=record.pgid, leader_pid=record.leader,
                                                   exit_file=exit_file(self._spool.directory, record.leader),
                                                   leader_started=record.leader_started)
        self.adopted = True
        self._launch_json = launch_json
        self._spawn_done.set()

    def _adopt_container(self, launch: ContainerLaunch | None, job_dir: Path) -> None:
        """An adopted launch's container: take over its image's lease and its bundles (TaskContainer.take_over),
        given back by `_close_container` when the tasks end, as for tasks this agent started."""
        if launch is None or self._confinement.containers is None:
            return
        container = TaskContainer(launch, self._confinement.containers, job_dir=job_dir, lease=self._lease_name(),
                                  identity=self._identity, gpus=self._owner[2], node=self._node_name)
        container.take_over()
        self._container = container

    def _lease_name(self) -> str:
        return lease_name(self._owner[0], self._owner[1])

    def _identity_variables(self) -> dict[str, str]:
        """The login variables of whom the tasks run as: the job's user, or in development mode the agent's
        (from the user database, never from the agent's environment)."""
        identity = self._identity or agent_identity()
        return {} if identity is None else identity.variables

    async def _open_container(self, launch: ContainerLaunch | None, job_dir: Path) -> None:
        """Before the tasks start: lease the launch's image on this node, or find its named container
        (SpawnError, nothing started, if it cannot be had). Every task then runs in it (`_spawn_task`)."""
        if launch is None:
            return
        self._refuse_if_told()
        identity = None
        if self._confinement.run_as_user:
            try:
                identity = self._task_identity()
            except UnknownUser as exc:
                raise SpawnError(str(exc)) from None
        container = TaskContainer(launch, self._confinement.containers, job_dir=job_dir, lease=self._lease_name(),
                                  identity=identity, gpus=self._owner[2], node=self._node_name)
        try:
            await container.open()
        except ContainerStartError as exc:
            raise SpawnError(f"container: {exc}") from None
        self._container = container

    def _close_container(self) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None

    def _spawn_task(self, argv: list[str], **streams: Any) -> StartingTask:
        """spawn_task as the tasks' user, in their cgroups (the leader enters them before it starts the task);
        in the launch's container when it has one (runc, started by the leader as the user, in the cgroup)."""
        if self._container is not None:
            try:
                argv = self._container.task_argv(len(self._starting), argv, streams["env"], streams["cwd"])
            except ContainerStartError as exc:
                raise SpawnError(f"container: {exc}") from None
        leaves = self._leaves if self._confinement.cgroups is not None else []
        return spawn_task(argv, identity=self._identity, exit_dir=self._spool.directory,
                          contact_file=self._spool.contact, cgroup_leaves=leaves,
                          cgroup_leaf=leaves[0] if leaves else None,  # the tracking hierarchy's
                          **streams)

    async def _end_cgroup(self) -> None:
        """Kill whatever is left in the tasks' cgroup (setsid or not) and remove it; note an OOM kill."""
        if self._cgroup is None:
            return
        self.oom_killed = self._cgroup.oom_killed(self._leaf_name)
        await self._cgroup.kill(self._leaf_name)

    def _begin_each(self, begins: Iterable[tuple[int, Callable[[], StartingTask]]]) -> None:
        """Start every task's leader; `_take_replies` then learns their tasks: the leaders start side by side,
        and the event loop runs on meanwhile. A failure to start one is raised there."""
        try:
            for rank, begin in begins:
                self._starting.append((rank, begin()))
        except SpawnError as exc:
            self._start_failure = exc

    async def _take_replies(self) -> None:
        """Keep every task that did start; then raise the first failure (SpawnError), for the caller's abort."""
        failure, self._start_failure = self._start_failure, None
        starting, self._starting = self._starting, []
        for rank, task in starting:
            try:
                proc = await task.result()
            except TaskStartFailed as exc:
                failure = failure or SpawnError(str(exc), exc.exit_code, own=exc.own)
                continue
            try:
                self._started(rank, proc)
            except SpawnError as exc:
                failure = failure or exc
            proc.confirm(recorded=rank in self._recorded)
        if failure is not None:
            raise failure

    def _started(self, rank: int, proc: TaskProcess) -> None:
        """Keep a task just spawned, and record it in the spool; one that cannot be recorded is killed
        (SpawnError: the caller's abort kills every task started so far)."""
        self._procs[rank] = proc
        try:
            self._spool.add(proc.pid, *self._owner, rank=rank, leader_pid=proc.leader_pid,
                            leader_started=proc.leader_started)
            self._recorded.add(rank)
        except OSError as exc:
            raise SpawnError(f"cannot record the task in {self._spool.directory}: {exc}", own=True) from exc

    async def _announce(self, reason: str, note: str | None = None) -> None:
        """slurmstepd's closing line (and corral's note) into the first local task's stderr: once, and only
        while tasks run."""
        if not self._announce_pending or not self._live_ranks():
            return
        self._announce_pending = False
        line = kill_reasons.closing_line(reason, self._entity, self._node_name, time.time())
        if note:
            line += f"corral: {' '.join(note.split())}\n"  # one line, whatever the note held
        try:
            await self._write_stderr(line.encode())
        except (OSError, SpawnError) as exc:
            log.warning("%s: cannot write the closing line: %s", self._what, exc)

    async def _write_stderr(self, data: bytes) -> None:
        """Append to the first local task's stderr (the subclass knows where that goes)."""
        raise NotImplementedError

    async def _reap(self, rank: int, proc: TaskProcess) -> TaskExit:
        """Wait for a task's main process; kill what it left in its group; record its exit."""
        returncode = await proc.wait()
        if proc.fenced is not None:
            log.warning("%s: rank %d was killed by its leader: %s", self._what, rank, proc.fenced)
            self.fenced = proc.fenced
        elif proc.unrecorded and self.infrastructure is None and not self._went_over_memory():
            self.infrastructure = await self._leader_lost(rank)
            log.warning("%s: infrastructure failure (%s): %s; killing its other tasks here", self._what,
                        self.infrastructure.kind, self.infrastructure.reason)
            # The run is lost (the controller stops the whole gang): its other tasks here need not run on
            # until they end by themselves before the failure is reported.
            for other in self._live_ranks():
                if other != rank:
                    killpg(self._procs[other].pid, signal.SIGKILL)
        exit_ = self._exits[rank] = task_exit(rank, returncode)
        await self._clear_group(proc.pid)
        if len(self._exits) == len(self._procs):
            self._all_exited.set()
        return exit_

    def _went_over_memory(self) -> bool:
        """The kernel killed a process of the tasks' cgroup for memory: a leader lost then was the OOM
        killer's pick (it shares the job's limit), and the job ends OUT_OF_MEMORY, its own doing."""
        return self._cgroup is not None and self._cgroup.oom_killed(self._leaf_name)

    async def _leader_lost(self, rank: int) -> InfrastructureFailure:
        """A task's leader died without recording the task's exit: someone killed it from outside (the task
        died with it, by its parent-death signal), or removed the task's cgroup, which kills everything in
        it first (another cluster's agent sweeping a cgroup of the same name, an operator). The leader is not
        the agent's child, so the signal that killed it cannot be known."""
        leaf = None if self._cgroup is None else self._cgroup.path / self._leaf_name
        if leaf is not None:
            loop = asyncio.get_running_loop()
            gives_up = loop.time() + CGROUP_GONE_WAIT_S
            while leaf.exists() and loop.time() < gives_up:
                await asyncio.sleep(LEFTOVER_POLL_S)
            if not leaf.exists():
                return InfrastructureFailure(kind="cgroup-removed",
                                             reason=f"cgroup {leaf} removed while task {rank} ran")
        return InfrastructureFailure(kind="leader-killed",
                                     reason=f"task leader of rank {rank} killed before it recorded the task's exit")

    async def _clear_group(self, pgid: int) -> None:
        """Whatever the task left behind in its group dies with it, as under Slurm's process tracking. While
        a kill's grace runs, the leftovers (which got the signal too) have until its end, as Slurm's
        KillWait gives them: an srun in a batch script forwards the signal to its step and reports the
        step's end (slurmstepd's line included) before it exits."""
        loop = asyncio.get_running_loop()
        while self._grace_ends is not None and loop.time() < self._grace_ends and group_alive(pgid):
            await asyncio.sleep(LEFTOVER_POLL_S)
        killpg(pgid, signal.SIGKILL)

    async def _kill_started(self) -> None:
        """SIGKILL every task started so far and wait for them (a sibling failed to start)."""
        for proc in self._procs.values():
            killpg(proc.pid, signal.SIGKILL)
        for proc in self._procs.values():
            await proc.wait()
            self._spool.remove(proc.pid)
            proc.forget()
        await self._end_cgroup()
        self._all_exited.set()

    def _live_ranks(self) -> list[int]:
        return [rank for rank in self._procs if rank not in self._exits]

    def _signal_live(self, signum: int) -> None:
        # Only tasks not yet reaped: a reaped leader's pid could belong to someone else by now.
        for rank in self._live_ranks():
            killpg(self._procs[rank].pid, signum)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def killpg(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone (or, for a permission error, no longer ours)


def set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
