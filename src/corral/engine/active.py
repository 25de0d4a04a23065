"""The engine's active jobs (PENDING, RUNNING, COMPLETING) and everything kept in step with them.

Four structures must move together whenever a job starts, is re-timed, is being stopped or ends: the
core's view of the job (pending or running), what it holds on each node (and the core's base pool built
from that), and the heaps of times it next needs the engine at. They are owned here, and changed only
through the methods below, each of which keeps them in step.
"""
from __future__ import annotations

from collections.abc import Mapping

from corral.core.model import PendingJob
from corral.engine.config import EngineConfig
from corral.engine.deadlines import Deadlines
from corral.engine.records import Job, Node
from corral.engine.tenancy import Tenancy
from corral.engine.usage import NodeUsage
from corral.engine.views import Views


class ActiveSet:
    def __init__(self, config: EngineConfig, nodes: Mapping[str, Node]) -> None:
        self.jobs: dict[int, Job] = {}
        self.views = Views(config, nodes)
        self.usage = NodeUsage()
        self.deadlines = Deadlines()
        # Pending jobs that preempted others and wait for them: preemptor id -> victim ids.
        self.claims: dict[int, set[int]] = {}
        # Pending jobs requeued with --requeue=expedite whose healthy nodes are held for them: id -> until.
        self.holds: dict[int, float] = {}

    @property
    def pending(self) -> dict[int, PendingJob]:
        return self.views.pending

    def running_jobs(self) -> list[Job]:
        """Running and completing jobs, in job id order: the per-cycle passes over them need not walk a
        long pending queue."""
        return [self.jobs[job_id] for job_id in sorted(self.views.running)]

    def queue(self, job: Job, now: float, tenancy: Tenancy, shares: dict[str, float]) -> None:
        """A job that waits: new, restored or requeued."""
        self.jobs[job.id] = job
        self.views.running.pop(job.id, None)
        if job.hold_until is not None:
            self.holds[job.id] = job.hold_until
        self.reprioritize(job, now, tenancy, shares)
        self.deadlines.push_eligible(job)

    def reprioritize(self, job: Job, now: float, tenancy: Tenancy, shares: dict[str, float]) -> None:
        """A waiting job's priority inputs changed (held, updated, claiming preempted resources)."""
        self.views.pending_view(job, now, tenancy, shares, job.id in self.claims)

    def occupy(self, job: Job, tenancy: Tenancy) -> None:
        """A job started (or was restored running): its view, its usage and its deadlines."""
        self.jobs[job.id] = job
        self.views.pending.pop(job.id, None)
        self.claims.pop(job.id, None)
        self.holds.pop(job.id, None)
        self.restate(job, tenancy)
        self.usage.add(job)

    def restate(self, job: Job, tenancy: Tenancy) -> None:
        """A running or completing job's times or limits changed (updated, being stopped, new tenancy)."""
        view = self.views.running_view(job, tenancy)
        self.usage.retime(job)
        self.deadlines.push(job, view)

    def rearm(self, job: Job) -> None:
        """A completing job's kill was re-sent with a new deadline."""
        self.deadlines.push(job, self.views.running.get(job.id))

    def release(self, job: Job) -> None:
        """The job's processes are gone: what it held on its nodes is free."""
        self.usage.remove(job)

    def drop(self, job: Job) -> None:
        """The job ended: it is no longer active."""
        self.views.forget(job.id)
        self.claims.pop(job.id, None)
        self.holds.pop(job.id, None)
        del self.jobs[job.id]

    def node_changed(self, name: str) -> None:
        """A node registered, was drained or lost: its view and the base pool are rebuilt."""
        self.usage.changed(name)
