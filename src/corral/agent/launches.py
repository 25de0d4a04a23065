"""The agent's commands that start, signal, attach to and adopt work on this node (see agent.py)."""
from __future__ import annotations

import asyncio
import logging
import shutil
import signal

from corral.agent.adoption import INTERRUPTED_START, Adoptable, find_adoptable
from corral.agent.agent_state import AgentState
from corral.agent.cgroups import JobCgroup
from corral.agent.container_tasks import abandon_container
from corral.agent.leaders import forget_exits
from corral.agent.mps import MpsError
from corral.agent.runner import JobRunner
from corral.agent.step_runner import StepRunner
from corral.agent.task_spool import SWEEP_GRACE_S, live_members, sweep
from corral.agent.tasks import EXIT_SPAWN_FAILED
from corral.protocol import (
    AttachStep,
    Command,
    InfrastructureFailure,
    LaunchJob,
    LaunchStep,
    NodeFinished,
    NodeStarted,
    SignalJob,
    StepFinished,
    TaskExit,
)

log = logging.getLogger(__name__)

# How many (job, restart) launches to remember for ignoring re-sent commands.
REMEMBERED_LAUNCHES = 10_000
JOB_DIR_POLL_S = 0.2  # how often an ended job's directory waits for its last steps here to close


class Launches(AgentState):
    """Launching, driving, signalling and adopting the jobs and steps that run here."""

    # -- tasks of an earlier life

    async def kill_recorded_tasks(self, why: str) -> None:
        """Kill the tasks the spool records (an earlier agent's, or this one's when it stops) and wait
        until they are gone. Those that survive SIGKILL keep their GPUs out of any launch."""
        killed, self._unkillable = await asyncio.to_thread(sweep, self._task_spool)
        for record in killed:
            log.warning("killed the tasks of %s: %s", record.describe(), why)
        if self._confinement.cgroups is not None:  # and whatever they started, setsid or not
            for cgroup in self._confinement.cgroups.leftover_jobs():
                log.warning("killing what is left in %s: %s", cgroup.path, why)
                await cgroup.kill()
        for record in self._unkillable:
            log.error("the leftover tasks of %s outlived SIGKILL: launches onto its GPUs are refused",
                      record.describe())

    async def adopt_recorded_tasks(self) -> None:
        """Adopt what an earlier agent left running here (adoption.py); kill the rest, and whatever is left
        in the cgroups of jobs and steps not adopted. Those that survive SIGKILL keep their GPUs out of any
        launch."""
        found = await asyncio.to_thread(find_adoptable, self._task_spool)
        for job_id, step_id, why in found.lost:
            log.warning("cannot adopt %s: %s", f"job {job_id}" if step_id is None else f"step {job_id}.{step_id}", why)
        killed, self._unkillable = await asyncio.to_thread(sweep, self._task_spool, SWEEP_GRACE_S, found.to_kill)
        for record in killed:
            log.warning("killed the tasks of %s: they cannot be adopted", record.describe())
        for job_id, step_id, _ in found.lost:  # their containers' leftovers and image leases: nobody closes them
            await asyncio.to_thread(abandon_container, self._confinement.containers,
                                    self._spool_dir / f"job{job_id}", job_id, step_id, self.node)
        for adoptable in found.adoptable:
            self._adopt(adoptable)
        leaders = {record.leader for adoptable in found.adoptable for record in adoptable.records}
        await asyncio.to_thread(forget_exits, self._task_spool.directory, leaders)
        for launch, why in found.killed_jobs:
            exits = [TaskExit(rank=t.rank, exit_code=0, signal=signal.SIGKILL) for t in launch.tasks]
            failure = InfrastructureFailure(kind="leader-killed", reason=f"{why}, while no agent watched it")
            self._post(NodeFinished(job_id=launch.job_id, tasks=exits, infrastructure=failure,
                                    restart_count=launch.restart_count))
        for launch in found.interrupted_jobs:
            self._launched[(launch.job_id, launch.restart_count)] = None  # that run does not start again here
            exits = [TaskExit(rank=t.rank, exit_code=0, signal=signal.SIGKILL) for t in launch.tasks]
            failure = InfrastructureFailure(kind="agent-error", reason=INTERRUPTED_START)
            self._post(NodeFinished(job_id=launch.job_id, tasks=exits, infrastructure=failure,
                                    restart_count=launch.restart_count))
        for step in found.lost_steps:
            exits = [TaskExit(rank=t.rank, exit_code=0, signal=signal.SIGKILL) for t in step.tasks]
            self._post(StepFinished(job_id=step.job_id, step_id=step.step_id, tasks=exits,
                                    error=f"lost on {self.node}: its tasks died while no agent watched them"))
        if self._confinement.cgroups is not None:  # whatever the others started, setsid or not
            kept = {(a.launch.job_id, a.launch.step_id if isinstance(a.launch, LaunchStep) else None)
                    for a in found.adoptable}
            for cgroup in self._confinement.cgroups.leftover_jobs():
                await _kill_unadopted(cgroup, kept)
        for record in self._unkillable:
            log.error("the leftover tasks of %s outlived SIGKILL: launches onto its GPUs are refused",
                      record.describe())

    def _adopt(self, adoptable: Adoptable) -> None:
        launch, records = adoptable.launch, adoptable.records
        if isinstance(launch, LaunchJob):
            job = JobRunner(launch, node_name=self.node, spool_dir=self._spool_dir, base_env=self._base_env,
                            confinement=self._confinement)
            job.adopt(records, adoptable.launch_json)
            self._replicas.adopt(launch)
            self._runners[launch.job_id] = job
            self._launched[(launch.job_id, launch.restart_count)] = None
            self._spawn_background(self._drive(job), f"job-{launch.job_id}")
            what = f"job {launch.job_id}"
        else:
            step = StepRunner(launch, node_name=self.node, spool_dir=self._spool_dir, base_env=self._base_env,
                              confinement=self._confinement)
            step.adopt(records, adoptable.launch_json)
            self._steps[step.key] = step
            self._launched_steps[(launch.job_id, launch.step_id, launch.restart_count)] = None
            self._spawn_background(self._drive_step(step), f"step-{launch.job_id}.{launch.step_id}")
            what = f"step {launch.job_id}.{launch.step_id}"
        log.info("adopted %s: %d task(s), still running or ended while no agent watched", what, len(records))

    def _busy_devices(self, launch: LaunchJob | LaunchStep) -> str | None:
        """Why the launch's devices may not go to its job: a live task of another job holds some of them,
        or None. Shares of one device (the controller keeps their sum within it) do not exclude each other."""
        job_id, gpus = launch.job_id, launch.node_gpus
        runners: list[JobRunner | StepRunner] = [*self._runners.values(), *self._steps.values()]
        holders = [(r.job_id, tuple(r.launch.node_gpus)) for r in runners
                   if r.holds_devices and not (launch.share and r.launch.share)]
        self._unkillable = [r for r in self._unkillable if live_members(r)]
        holders += [(r.job_id, r.gpus) for r in self._unkillable]
        for other, held in holders:
            shared = sorted(set(held) & set(gpus))
            if other != job_id and shared:
                return (f"GPU{'s' if len(shared) > 1 else ''} {','.join(map(str, shared))} of node {self.node} "
                        f"still in use by job {other}, whose tasks there have not exited: refusing to start "
                        f"job {job_id} there")
        return None

    # -- commands

    def _handle(self, command: Command) -> None:
        if command.seq and command.seq <= self._after_seq:
            return  # re-delivered after a lost poll reply: already handled
        self._after_seq = max(self._after_seq, command.seq)
        if isinstance(command, LaunchJob):
            self._launch(command)
        elif isinstance(command, LaunchStep):
            self._launch_step(command)
        elif isinstance(command, SignalJob):
            self._signal(command)
        elif isinstance(command, AttachStep):
            self._attach(command)

    def _attach(self, command: AttachStep) -> None:
        """sattach: the step's I/O goes to one more listener too (while the step runs here)."""
        step = self._steps.get((command.job_id, command.step_id))
        if step is None:
            log.info("sattach for step %d.%d, which does not run here: ignored", command.job_id, command.step_id)
            return
        self._spawn_background(step.attach(command.io_host, command.io_port, command.io_token),
                               f"attach-{command.job_id}.{command.step_id}")

    def _signal(self, command: SignalJob) -> None:
        """A job's signal: to its own tasks ("batch"), its steps ("steps", maybe only `step_id`), or both;
        a draining replica's after its `drain_s`."""
        if command.drain_s > 0:
            undrained = command.model_copy(update={"drain_s": 0.0})
            asyncio.get_running_loop().call_later(command.drain_s, self._signal, undrained)
            return
        job_id, reason = command.job_id, command.reason
        reached = 0
        # Steps first: their closing lines leave for srun before the batch shell (srun's parent) is signalled.
        if command.target in ("all", "steps"):
            reached += self._kill_steps(job_id, command.signal, command.grace_s, command.step_id, reason)
        if command.target in ("all", "batch"):
            reached += self._start_kill(job_id, command.signal, command.grace_s, steps=False, reason=reason,
                                        note=command.note)
        if command.target == "all" and command.grace_s >= 0:
            self._end_job_here(job_id)  # the job is being stopped, or is over: nothing new of it comes here
        if not reached:
            log.debug("signal for job %d (%s), which does not run here: ignored", job_id, command.target)

    def _end_job_here(self, job_id: int) -> None:
        """Remove the job's directory on this node (its named containers, decision 0020) once none of its tasks
        run here. Where the job's own tasks ran, their runner removes it at their end; a node where only its
        steps ran learns the job's end only from this Kill (engine `step_only_ends`)."""
        if job_id not in self._runners:
            self._spawn_background(self._remove_job_dir(job_id), f"end-{job_id}")

    async def _remove_job_dir(self, job_id: int) -> None:
        while any(job == job_id for job, _ in self._steps):  # they may be killed just now: let them close
            await asyncio.sleep(JOB_DIR_POLL_S)
        job_dir = self._spool_dir / f"job{job_id}"
        if job_id in self._runners or not job_dir.exists():
            return  # the job was requeued onto this node meanwhile: its new run owns the directory
        await asyncio.to_thread(shutil.rmtree, job_dir, True)
        log.info("job %d: ended; removed its directory %s", job_id, job_dir)

    def _launch(self, launch: LaunchJob) -> None:
        key = (launch.job_id, launch.restart_count)
        if key in self._launched or launch.job_id in self._runners:
            log.debug("launch of job %d (restart %d) already seen: ignored", *key)
            return
        self._launched[key] = None
        while len(self._launched) > REMEMBERED_LAUNCHES:
            self._launched.popitem(last=False)
        launch, unservable = self._replicas.prepare(launch)
        runner = JobRunner(launch, node_name=self.node, spool_dir=self._spool_dir, base_env=self._base_env,
                           refusal=self._busy_devices(launch) or unservable,
                           confinement=self._confinement)
        self._runners[launch.job_id] = runner
        self._spawn_background(self._drive(runner), f"job-{launch.job_id}")

    def _launch_step(self, launch: LaunchStep) -> None:
        key = (launch.job_id, launch.step_id)
        seen = (launch.job_id, launch.step_id, launch.restart_count)
        if seen in self._launched_steps or key in self._steps:
            log.debug("launch of step %d.%d (restart %d) already seen: ignored", *seen)
            return
        self._launched_steps[seen] = None
        while len(self._launched_steps) > REMEMBERED_LAUNCHES:
            self._launched_steps.popitem(last=False)
        runner = StepRunner(launch, node_name=self.node, spool_dir=self._spool_dir, base_env=self._base_env,
                            refusal=self._busy_devices(launch),
                            confinement=self._confinement)
        self._steps[key] = runner
        self._spawn_background(self._drive_step(runner), f"step-{key[0]}.{key[1]}")

    async def _drive_step(self, runner: StepRunner) -> None:
        """Post the step's StepFinished; the step leaves `running_steps` when its tasks are done."""
        try:
            async for event in runner.run():
                self._steps.pop(runner.key, None)
                event.usage = self._usage.final(runner.job_id, runner.step_id)
                self._releases[id(event)] = runner
                self._post(event)
        except Exception as exc:  # a bug must not take the agent down, nor leave the step unreported
            log.exception("step %d.%d: runner failed", *runner.key)
            self._steps.pop(runner.key, None)
            exits = [TaskExit(rank=t.rank, exit_code=EXIT_SPAWN_FAILED) for t in runner.launch.tasks]
            failure = InfrastructureFailure(kind="agent-error", reason=f"the agent's step runner failed: {exc}")
            self._post(StepFinished(job_id=runner.job_id, step_id=runner.step_id, tasks=exits,
                                    infrastructure=failure))

    async def _drive(self, runner: JobRunner) -> None:
        """Forward a job's events to the outbox; the job leaves `running_jobs` when its tasks are done. With
        health checks before jobs, a failing one refuses the launch: NodeUnhealthy goes first, so the
        controller requeues the job rather than failing it."""
        try:
            if self._health is not None and not runner.adopted:
                reason = await self._health.check_before_job(runner.job_id)
                if reason is not None:
                    runner.refuse(f"{self.node} failed its health check: {reason}")
            if runner.launch.share is not None and runner.adopted:
                self._mps.adopt(runner.job_id)  # its tasks outlived the agent, and so did the daemon
            elif runner.launch.share is not None:
                try:
                    await self._mps.acquire(runner.job_id)
                except MpsError as exc:
                    runner.refuse(f"{self.node}: {exc}")
            if runner.adopted:
                self._replicas.start_probes(runner)
            async for event in runner.run():
                if isinstance(event, NodeFinished):
                    self._replicas.finished(runner.job_id)
                    await self._mps.release(runner.job_id)  # not when the agent stops: its tasks live on
                    self._runners.pop(runner.job_id, None)
                    event.usage = self._usage.final(runner.job_id, None)
                    self._releases[id(event)] = runner
                else:
                    event.ports = self._replicas.ports(runner.job_id)
                self._post(event)
                if isinstance(event, NodeStarted):
                    self._replicas.start_probes(runner)
        except Exception as exc:  # a bug must not take the agent down, nor leave the job unreported
            log.exception("job %d: runner failed", runner.job_id)
            self._replicas.finished(runner.job_id)  # before its end is posted: no probe report after it
            await self._mps.release(runner.job_id)
            self._runners.pop(runner.job_id, None)
            exits = [TaskExit(rank=t.rank, exit_code=EXIT_SPAWN_FAILED) for t in runner.launch.tasks]
            # The agent's own failure, not the job's: the controller requeues it as after a node failure.
            failure = InfrastructureFailure(kind="agent-error", reason=f"the agent's job runner failed: {exc}")
            self._post(NodeFinished(job_id=runner.job_id, tasks=exits, infrastructure=failure,
                                    restart_count=runner.launch.restart_count))
        finally:
            self._replicas.finished(runner.job_id)  # also when the agent stops: no probe outlives it

    def _start_kill(self, job_id: int, signum: int, grace_s: float, *, steps: bool = True,
                    reason: str | None = None, note: str | None = None) -> int:
        """Signal a job's own tasks here and (unless `steps` is False) its steps; how many runners.
        `reason` (corral.kill_reasons): the runners write slurmstepd's closing line for it, and `note` after it."""
        reached = 0
        runner = self._runners.get(job_id)
        if runner is not None:
            self._spawn_background(runner.kill(signum, grace_s, reason, note), f"kill-{job_id}")
            reached += 1
        if steps:
            reached += self._kill_steps(job_id, signum, grace_s, reason=reason)
        return reached

    def _kill_steps(self, job_id: int, signum: int, grace_s: float, step_id: int | None = None,
                    reason: str | None = None) -> int:
        reached = 0
        for (job, step), runner in list(self._steps.items()):
            if job == job_id and step_id in (None, step):
                self._spawn_background(runner.kill(signum, grace_s, reason), f"kill-{job}.{step}")
                reached += 1
        return reached



async def _kill_unadopted(cgroup: JobCgroup, kept: set[tuple[int, int | None]]) -> None:
    """Kill a leftover job cgroup, or, for an adopted job, the leaves of its steps (or batch) not adopted."""
    number = cgroup.path.name.removeprefix("job_")
    adopted = {step for job, step in kept if number.isascii() and number.isdigit() and job == int(number)}
    if not adopted:
        log.warning("killing what is left in %s: not adopted", cgroup.path)
        await cgroup.kill()
        return
    leaves = {"batch" if step is None else f"step_{step}" for step in adopted}
    for leaf in [p for p in cgroup.path.iterdir() if p.is_dir() and p.name not in leaves]:
        log.warning("killing what is left in %s: not adopted", leaf)
        await cgroup.kill(leaf.name)
