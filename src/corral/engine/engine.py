"""The engine: folds stimuli (submissions, cancels, agent reports, the passing of time) into job and node
records, runs scheduling cycles through the pure core, and returns commands for the shell to carry out.

It holds only active jobs (PENDING, RUNNING, COMPLETING) in memory; a job that ends is handed to the
store through the dirty set and then forgotten. The live controller and the simulator both drive this
class; they differ only in how they carry out its commands and where `now` comes from.
"""
from __future__ import annotations

import signal
from collections.abc import Iterable

from corral.core.model import CyclePlan, PendingJob
from corral.core.scheduler import schedule
from corral.engine.commands import Command, Kill, Launch
from corral.engine import membership
from corral.engine.config import EngineConfig
from corral.engine.membership import Inventory
from corral.engine.outcome import final_state, fold_exit, node_result
from corral.engine.records import Job, JobSpec, JobState, Node, NodeRun
from corral.engine.snapshot import build_snapshot

ACTIVE = (JobState.PENDING, JobState.RUNNING, JobState.COMPLETING)


class UnknownJob(KeyError):
    pass


class JobAlreadyFinished(ValueError):
    pass


class Engine:
    def __init__(self, config: EngineConfig, jobs: Iterable[Job] = (), nodes: Iterable[Node] = (),
                 next_job_id: int = 1) -> None:
        self.config = config
        self.jobs: dict[int, Job] = {}
        self.pending: dict[int, PendingJob] = {}
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        self.next_job_id = next_job_id
        self.dirty_jobs: dict[int, Job] = {}
        self.dirty_nodes: set[str] = set()
        self.last_plan: CyclePlan | None = None
        for job in jobs:
            if job.state in ACTIVE:
                self._track(job)

    # ----- bookkeeping

    def _track(self, job: Job) -> None:
        self.jobs[job.id] = job
        if job.state is JobState.PENDING:
            self.pending[job.id] = PendingJob(job.id, job.spec.priority, job.submit_time, job.spec.request)

    def _touch(self, job: Job) -> None:
        self.dirty_jobs[job.id] = job

    def take_dirty(self) -> tuple[list[Job], list[Node]]:
        jobs = list(self.dirty_jobs.values())
        nodes = [self.nodes[n] for n in self.dirty_nodes if n in self.nodes]
        self.dirty_jobs.clear()
        self.dirty_nodes.clear()
        return jobs, nodes

    # ----- user stimuli

    def submit(self, spec: JobSpec, now: float) -> Job:
        job = Job(id=self.next_job_id, spec=spec, submit_time=now)
        self.next_job_id += 1
        self._track(job)
        self._touch(job)
        return job

    def cancel(self, job_id: int, now: float) -> list[Command]:
        job = self.jobs.get(job_id)
        if job is None:
            raise UnknownJob(job_id)
        if job.state is JobState.PENDING:
            del self.pending[job_id]
            self._finish(job, now, JobState.CANCELLED)
            return []
        if job.state is JobState.RUNNING:
            return self._begin_kill(job, now, JobState.CANCELLED)
        return []  # already completing: it ends as it was going to

    # ----- scheduling

    def schedule(self, now: float) -> list[Command]:
        plan = schedule(build_snapshot(self, now), self.config.scheduler)
        self.last_plan = plan
        commands: list[Command] = []
        for start in plan.starts:
            job = self.jobs[start.job_id]
            del self.pending[job.id]
            job.state, job.start_time, job.slices = JobState.RUNNING, now, start.slices
            job.reason, job.estimated_start = "None", None
            job.runs = {s.node: NodeRun() for s in start.slices}
            self._touch(job)
            commands.extend(Launch(job.id, s.node) for s in start.slices)
        for wait in plan.waiting:
            job = self.jobs[wait.job_id]
            if job.reason != wait.reason.value or job.estimated_start != wait.estimated_start:
                job.reason, job.estimated_start = wait.reason.value, wait.estimated_start
                self._touch(job)
        return commands

    # ----- agent reports

    def node_started(self, node: str, job_id: int, now: float) -> None:
        job = self.jobs.get(job_id)
        run = job.runs.get(node) if job else None
        if run is not None and not run.started:
            run.started = True
            self._touch(job)

    def node_finished(self, node: str, job_id: int, tasks: list[tuple[int, int, int]], error: str | None,
                      now: float) -> list[Command]:
        job = self.jobs.get(job_id)
        if job is None or node not in job.runs or job.runs[node].finished:
            return []  # a repeat of a report already folded in
        job.runs[node] = node_result(tasks, error)
        if error is not None:
            job.reason = f"LaunchFailed:{error}"[:200]
        self._touch(job)
        if all(r.finished for r in job.runs.values()):
            self._finish(job, now, final_state(job))
            return []
        if error is not None and job.state is JobState.RUNNING:
            # One node could not start its part of the gang: the whole gang ends.
            return self._begin_kill(job, now, JobState.FAILED)
        return []

    # ----- time

    def tick(self, now: float) -> list[Command]:
        """Enforce time limits, re-send overdue kills and mark silent nodes down."""
        commands: list[Command] = []
        for job in list(self.jobs.values()):
            if job.state is JobState.RUNNING and now >= job.start_time + job.spec.request.time_limit_s:
                commands.extend(self._begin_kill(job, now, JobState.TIMEOUT))
            elif job.state is JobState.COMPLETING and job.kill_deadline is not None and now >= job.kill_deadline:
                job.kill_deadline = now + self.config.kill_report_timeout_s
                commands.extend(Kill(job.id, n, signal.SIGKILL, 0.0) for n, r in job.runs.items() if not r.finished)
        for node in self.nodes.values():
            if node.up and now - node.last_seen > self.config.node_timeout_s:
                commands.extend(self.node_lost(node.name, now))
        return commands

    def next_deadline(self) -> float | None:
        times: list[float] = []
        for job in self.jobs.values():
            if job.state is JobState.RUNNING:
                times.append(job.start_time + job.spec.request.time_limit_s)
            elif job.state is JobState.COMPLETING and job.kill_deadline is not None:
                times.append(job.kill_deadline)
        times.extend(n.last_seen + self.config.node_timeout_s for n in self.nodes.values() if n.up)
        return min(times, default=None)

    # ----- nodes

    def register_node(self, name: str, inventory: Inventory, running: set[int], finished: set[int],
                      now: float) -> tuple[list[int], list[Command]]:
        return membership.register(self, name, inventory, running, finished, now)

    def contact(self, name: str, now: float) -> bool:
        return membership.contact(self, name, now)

    def set_drain(self, name: str, drain: bool, reason: str = "") -> Node:
        if name not in self.nodes:
            raise KeyError(name)
        return membership.set_drain(self, name, drain, reason)

    def node_lost(self, name: str, now: float) -> list[Command]:
        node = self.nodes[name]
        node.up = False
        self.dirty_nodes.add(name)
        commands: list[Command] = []
        for job in list(self.jobs.values()):
            run = job.runs.get(name)
            if run is None or run.finished or job.state not in (JobState.RUNNING, JobState.COMPLETING):
                continue
            job.runs[name] = NodeRun(started=run.started, finished=True, signal=signal.SIGKILL)
            commands.extend(self._fail_gang(job, now))
        return commands

    def _fail_gang(self, job: Job, now: float) -> list[Command]:
        self._touch(job)
        if all(r.finished for r in job.runs.values()):
            job.final_state = job.final_state or JobState.NODE_FAIL
            self._finish(job, now, final_state(job))
            return []
        if job.state is JobState.RUNNING:
            return self._begin_kill(job, now, JobState.NODE_FAIL)
        return []

    # ----- endings

    def _begin_kill(self, job: Job, now: float, final: JobState) -> list[Command]:
        job.state, job.final_state = JobState.COMPLETING, final
        grace = self.config.kill_grace_s
        job.kill_deadline = now + grace + self.config.kill_report_timeout_s
        self._touch(job)
        return [Kill(job.id, n, signal.SIGTERM, grace) for n, r in job.runs.items() if not r.finished]

    def _finish(self, job: Job, now: float, state: JobState) -> None:
        job.state, job.end_time, job.kill_deadline = state, now, None
        job.exit_code, job.exit_signal = fold_exit(job)
        if state is not JobState.PENDING:
            job.estimated_start = None
        self._touch(job)
        del self.jobs[job.id]
