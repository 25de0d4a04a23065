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

from collections.abc import Iterable
from dataclasses import dataclass, field

from corral.engine.after_run import stop_towards
from corral.engine.commands import Command
from corral.engine.records import CLUSTER_STOPPED, Job, JobState

STOPPED_EVENT = CLUSTER_STOPPED


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


def plan_stop(running: Iterable[Job], pending: int) -> ClusterStop:
    """What becomes of each running and completing job (the engine then stops them; `commands` empty)."""
    requeue: list[int] = []
    end: list[int] = []
    already: list[int] = []
    for job in running:
        if job.state is not JobState.RUNNING:
            already.append(job.id)
        else:
            towards = stop_towards(job.spec, CLUSTER_STOPPED)
            (requeue if towards is JobState.PENDING else end).append(job.id)
    return ClusterStop(tuple(requeue), tuple(end), tuple(already), pending)
