"""Build the core's immutable view of the cluster from the engine's records."""
from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from corral.core.model import Snapshot

if TYPE_CHECKING:
    from corral.engine.engine import Engine


def node_usage(engine: Engine) -> dict[str, tuple[set[int], int, int]]:
    """Per node: (allocated devices, cpus, mem_mib) held by running and completing jobs."""
    return {name: engine.usage.of(name) for name in engine.nodes}


def build_snapshot(engine: Engine, now: float, exclude: AbstractSet[int] = frozenset()) -> Snapshot:
    nodes = engine.usage.views(engine.nodes.values())
    pending = engine.views.pending
    if exclude:
        waiting = tuple(v for job_id, v in pending.items() if job_id not in exclude)
    else:
        waiting = tuple(pending.values())
    running = tuple(engine.views.running.values())
    base = engine.usage.base(engine.nodes.values(), running)
    return Snapshot(
        now=now, nodes=nodes, partitions=tuple(p.core() for p in engine.config.partitions),
        running=running, pending=waiting, queues=engine.tenancy.queues,
        reservations=engine.reservations.core(), base=base,
    )
