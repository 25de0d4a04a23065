"""Runs one job's tasks on this node: spawn, wait, signal, report.

Design choices, each mirroring what slurmd/slurmstepd do or what the agent's resilience needs:

- Each task is its own session and process group (`start_new_session`), so a signal reaches everything the
  task started, and nothing else. When a task's main process exits, whatever it left running in its group is
  SIGKILLed, as Slurm's process tracking does when a batch script ends; while a kill's grace runs, not
  before the group is empty or the grace is over (Slurm's KillWait: an srun relays its step's end).
- Output and error files are opened with O_APPEND|O_CREAT: several tasks and nodes may write one file.
  A batch job's files are truncated first unless --open-mode=append (Slurm's default for sbatch); a file
  shared by several tasks is never truncated, and other jobs append by default.
- Each task is started by a leader of its own (task_leader.c), which stays its parent, records its exit
  status in the spool and outlives the agent: a restarted agent adopts the task (decision 0015).
- Leaders are started with `subprocess.Popen` and awaited through a pidfd, not through
  `asyncio.create_subprocess_exec`: asyncio's subprocess transport SIGKILLs its child when it is closed or
  garbage-collected, which would kill every running job when the agent stops or restarts. Tasks must
  outlive the agent, as they outlive a slurmd restart.
- A task killed by a signal is reported as exit_code 0 and signal N (Slurm's "0:9"), not 128+N: the
  shell's 128+N convention only applies when a shell reports its child's death.
- Failing to start (missing workdir, executable or output directory; a script without "#!") never raises:
  it becomes a NodeFinished with `error` set, every local task reported with exit code 127 (command not
  found), 126 (not executable) or 1 (anything else), and any sibling task already started is killed.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from corral import kill_reasons
from corral.agent.environment import output_path, task_environment
from corral.agent.identity import file_access_as
from corral.agent.leaders import StartingTask
from corral.agent.task_spool import TaskRecord, TaskSpool
from corral.agent.tasks import (  # noqa: F401 - task_exit is imported from here too
    DEVELOPMENT_MODE,
    Confinement,
    LocalTasks,
    SpawnError,
    append_to,
    check_workdir,
    describe_exits,
    open_output,
    task_exit,
)
from corral.protocol import LaunchJob, NodeFinished, NodeStarted, TaskExit, TaskLaunch

log = logging.getLogger(__name__)


class JobRunner(LocalTasks):
    """One job's local tasks. `run()` yields NodeStarted then NodeFinished (or only NodeFinished with
    `error` if the tasks could not be started); `kill()` (see LocalTasks) may be called at any time."""

    def __init__(self, launch: LaunchJob, *, node_name: str, spool_dir: Path, base_env: Mapping[str, str],
                 refusal: str | None = None, confinement: Confinement = DEVELOPMENT_MODE):
        super().__init__(f"job {launch.job_id}", kill_reasons.job_entity(launch.job_id), node_name,
                         announces=launch.node_index == 0, spool=TaskSpool(spool_dir), job_id=launch.job_id,
                         step_id=None, gpus=launch.node_gpus, refusal=refusal, user=launch.user, uid=launch.uid,
                         confinement=confinement, mem_mib=launch.mem_per_node_mib,
                         cpus=launch.cpus_on_node)
        self.launch = launch
        self.job_id = launch.job_id
        self._job_dir = Path(spool_dir) / f"job{launch.job_id}"
        self._base_env = dict(base_env)

    def adopt(self, records: list[TaskRecord], launch_json: str) -> None:
        super().adopt(records, launch_json)
        self._adopt_container(self.launch.container, self._job_dir)

    async def run(self) -> AsyncIterator[NodeStarted | NodeFinished]:
        if not self.adopted:
            try:
                await self._open_container(self.launch.container, self._job_dir)
                self._spawn_all()
                await self._take_replies()
            except SpawnError as exc:
                finished = await self._abort(exc)
                self._spawn_done.set()
                yield finished
                return
            self._spawn_done.set()
        # Watch in tasks of their own, so exits are seen (and kill() can return early) whether or not
        # the consumer is pulling from this generator at the time.
        watchers = [asyncio.create_task(self._reap(rank, proc)) for rank, proc in self._procs.items()]
        try:
            if self.adopted:
                log.info("job %d: adopted %d task(s) of an earlier agent, pids %s", self.job_id, len(self._procs),
                         self.pids)
            else:
                log.info("job %d: started %d task(s), pids %s", self.job_id, len(self._procs), self.pids)
                yield NodeStarted(job_id=self.job_id, pids=self.pids, restart_count=self.launch.restart_count)
            await asyncio.gather(*watchers)
        finally:
            for watcher in watchers:
                watcher.cancel()  # only matters when the consumer gave up: the processes live on
        await self._end_cgroup()
        self._close_container()
        shutil.rmtree(self._job_dir, ignore_errors=True)
        exits = [self._exits[rank] for rank in sorted(self._exits)]
        log.info("job %d: all tasks exited: %s%s", self.job_id, describe_exits(exits), self._why_ended())
        yield NodeFinished(job_id=self.job_id, tasks=exits, oom_killed=self.oom_killed, fenced=self.fenced,
                           infrastructure=self.infrastructure, restart_count=self.launch.restart_count)

    def _why_ended(self) -> str:
        """For the log: what ended the tasks, when it was not (only) themselves."""
        if self.oom_killed:
            return " (out of memory)"
        if self.fenced:
            return f" (fenced: {self.fenced})"
        if self.infrastructure is not None:
            return f" (infrastructure failure: {self.infrastructure.reason})"
        return ""

    # -- starting

    def _spawn_all(self) -> None:
        self._prepare()
        self._save_launch(self.launch.model_dump_json())
        check_workdir(self.launch.workdir, self._identity)
        argv = self._command()
        self._begin_each((task.rank, functools.partial(self._spawn, task, argv)) for task in self.launch.tasks)

    def _command(self) -> list[str]:
        """argv of every task: the job's script (given the job's argv as its arguments) or the argv."""
        if self.launch.script is None:
            if not self.launch.argv:
                raise SpawnError("the job has neither a script nor a command")
            return list(self.launch.argv)
        if not self.launch.script.startswith("#!"):
            raise SpawnError("the batch script does not start with a #! line naming its interpreter "
                             "(for example #!/bin/bash)")
        script = self._write_script(self.launch.script)
        if self._container is not None:  # a service replica's or `srun`'s script, run in the container
            return [self._container.share_file(script), *self.launch.argv]
        return [str(script), *self.launch.argv]

    def _write_script(self, script: str) -> Path:
        path = self._job_dir / "script"
        try:
            self._job_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o700)
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(script)
            os.chmod(path, 0o700)  # the umask may have narrowed the mode given to open()
            if self._identity is not None:  # the script is the user's, as slurmd's slurm_script
                os.chown(self._job_dir, self._identity.uid, self._identity.gid)
                os.chown(path, self._identity.uid, self._identity.gid)
        except OSError as exc:
            raise SpawnError(f"cannot write the batch script to {path}: {exc}", own=True) from exc
        self._check_readable(path)
        return path

    def _check_readable(self, path: Path) -> None:
        """The user can read the script: every directory above the spool must let others through."""
        try:
            with file_access_as(self._identity):
                os.close(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except OSError as exc:
            raise SpawnError(f"user {self._user} cannot read the batch script {path} ({exc.strerror}): the "
                             f"agent's spool directory must be reachable by every user (mode o+x on each "
                             f"directory above it)") from None

    def _spawn(self, task: TaskLaunch, argv: list[str]) -> StartingTask:
        stdout_fd, stderr_fd = self._open_outputs(task)
        env = task_environment(self.launch, task, self._node_name, self._base_env)
        env.update(self._identity_variables())
        try:
            return self._spawn_task(
                argv,
                cwd=self.launch.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=stdout_fd,
                stderr=stderr_fd,
            )
        finally:
            os.close(stdout_fd)
            if stderr_fd != stdout_fd:
                os.close(stderr_fd)

    def _open_outputs(self, task: TaskLaunch) -> tuple[int, int]:
        """File descriptors for the task's stdout and stderr (the same one when `error` is None)."""
        # Slurm truncates a batch job's files unless --open-mode=append; a file that several tasks or
        # nodes share is only ever appended to, so that nobody truncates another task's output.
        truncate = self.launch.batch and self.launch.open_mode == "truncate"
        stdout_path = self._output_path(self.launch.output, task)
        stdout_fd = open_output(stdout_path, truncate, self._identity)
        if self.launch.error is None:
            return stdout_fd, stdout_fd
        try:
            error_path = self._output_path(self.launch.error, task)
            return stdout_fd, open_output(error_path, truncate and error_path != stdout_path, self._identity)
        except SpawnError:
            os.close(stdout_fd)
            raise

    def _output_path(self, pattern: str, task: TaskLaunch) -> str:
        return output_path(self.launch, pattern, self._node_name, task.rank)

    async def _write_stderr(self, data: bytes) -> None:
        # The file the task opened for its stderr: --error, or --output when stderr is not separate.
        append_to(self._output_path(self.launch.error or self.launch.output, self.launch.tasks[0]), data,
                  self._identity)

    async def _abort(self, exc: SpawnError) -> NodeFinished:
        """Kill the tasks started before the failure; report every local task as failed to start."""
        log.warning("job %d: cannot start: %s", self.job_id, exc)
        await self._kill_started()
        self._close_container()
        shutil.rmtree(self._job_dir, ignore_errors=True)
        self._forget_launch()
        exits = [TaskExit(rank=t.rank, exit_code=exc.exit_code) for t in self.launch.tasks]
        return NodeFinished(job_id=self.job_id, tasks=exits, error=str(exc), infrastructure=exc.infrastructure(),
                            restart_count=self.launch.restart_count)

