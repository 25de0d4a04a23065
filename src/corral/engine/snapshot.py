"""Build the core's immutable view of the cluster from the engine's records."""
from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from corral.core.model import AdvanceReservation, QueueQuota
from corral.core.snapshot import Snapshot
from corral.engine.active import ActiveSet
from corral.engine.config import EngineConfig
from corral.engine.records import Node


def node_usage(active: ActiveSet, nodes: Mapping[str, Node]) -> dict[str, tuple[set[int], int, int]]:
    """Per node: (allocated devices, cpus, mem_mib) held by running and completing jobs."""
    return {name: active.usage.of(name) for name in nodes}


def build_snapshot(active: ActiveSet, nodes: Mapping[str, Node], config: EngineConfig,
                   queues: tuple[QueueQuota, ...], reservations: tuple[AdvanceReservation, ...], now: float,
                   exclude: AbstractSet[int] = frozenset(), budgets: Mapping[str, int] | None = None) -> Snapshot:
    node_views = active.usage.views(nodes.values())
    pending = active.views.pending
    if exclude:
        waiting = tuple(v for job_id, v in pending.items() if job_id not in exclude)
    else:
        waiting = tuple(pending.values())
    running = tuple(active.views.running.values())
    base = active.usage.base(nodes.values(), running)
    return Snapshot(
        now=now, nodes=node_views, partitions=tuple(p.core() for p in config.partitions),
        running=running, pending=waiting, queues=queues, reservations=reservations, base=base,
        disruption_budgets=budgets or {},
    )
