"""The cluster as one scheduling cycle sees it (`Snapshot`): the input of `schedule`, with the configuration."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corral.core.model import AdvanceReservation, NodeView, Partition, PendingJob, QueueQuota, RunningJob

if TYPE_CHECKING:
    from corral.core.basepool import BasePool


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[NodeView, ...]
    partitions: tuple[Partition, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]
    queues: tuple[QueueQuota, ...] = ()
    reservations: tuple[AdvanceReservation, ...] = ()
    # How many running jobs of each group (RunningJob.budget_group) preemption may still take: a service's
    # ready replicas above its min_ready (a PodDisruptionBudget). A group not named has no budget.
    disruption_budgets: Mapping[str, int] = field(default_factory=dict)
    # Optional: the engine's base pool of exactly `nodes` and `running` (releases at their raw expected ends),
    # kept up to date between cycles. The cycle works on a copy-on-write fork of it instead of building its
    # working pool from scratch; it never changes the base (core/basepool.py). None: built from the fields above.
    base: BasePool | None = field(default=None, compare=False)
