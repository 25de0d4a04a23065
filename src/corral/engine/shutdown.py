"""Stopping the cluster (`corral up` ending): what becomes of every job, decided before the controller
exits, while the agents still listen.

A stopped cluster loses no job and leaves nothing running: each running job's tasks are killed (SIGTERM,
the kill grace, SIGKILL, steps included) and, once its nodes report them gone, the job is requeued (same
id, its restart count up by one, as after a preemption or `scontrol requeue`) if it allows requeue, or
ends NODE_FAIL if it does not. Jobs already being stopped end as they were going to. Pending jobs stay
pending. From then on the engine starts nothing (`Engine.stopping`), so a requeued job waits for the
next start of the cluster instead of being launched again on agents that are about to go away.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corral.engine.commands import Command
from corral.engine.records import JobSpec, JobState

if TYPE_CHECKING:
    from corral.engine.engine import Engine

STOPPED_EVENT = "cluster-stopped"


@dataclass(frozen=True, slots=True)
class ClusterStop:
    """The decision, by job id, and the kills that carry it out."""

    requeue: tuple[int, ...]  # running jobs that go back to PENDING once their tasks are gone
    end: tuple[int, ...]  # running jobs that may not be requeued: they end NODE_FAIL
    already_stopping: tuple[int, ...]  # COMPLETING jobs: they end as they were going to
    pending: int  # jobs that wait, and keep waiting
    commands: list[Command] = field(default_factory=list)

    @property
    def stopped(self) -> tuple[int, ...]:
        """Every job whose tasks must be reported gone before the cluster is stopped cleanly."""
        return self.requeue + self.end + self.already_stopping


def may_requeue(spec: JobSpec) -> bool:
    # An allocation's holder (salloc, srun outside a job) goes away with the cluster: requeued, the
    # allocation would wait for a holder that never comes back.
    return spec.requeue and not spec.allocation


def stop_cluster(engine: Engine, now: float) -> ClusterStop:
    engine.stopping = True
    pending = sum(1 for job in engine.jobs.values() if job.state is JobState.PENDING)
    requeue: list[int] = []
    end: list[int] = []
    already: list[int] = []
    commands: list[Command] = []
    for job in engine._active():
        if job.state is not JobState.RUNNING:
            already.append(job.id)
            continue
        again = may_requeue(job.spec)
        (requeue if again else end).append(job.id)
        job.history.append({"t": now, "event": STOPPED_EVENT,
                            "outcome": "requeued" if again else JobState.NODE_FAIL.value})
        commands += engine._begin_kill(job, now, JobState.PENDING if again else JobState.NODE_FAIL)
    return ClusterStop(tuple(requeue), tuple(end), tuple(already), pending, commands)
