"""Build the core's immutable view of the cluster from the engine's records."""
from __future__ import annotations

from typing import TYPE_CHECKING

from corral.core.model import NodeView, Snapshot
from corral.engine.records import JobState

if TYPE_CHECKING:
    from corral.engine.engine import Engine


def node_usage(engine: Engine) -> dict[str, tuple[set[int], int, int]]:
    """Per node: (allocated devices, cpus, mem_mib) held by running and completing jobs."""
    used: dict[str, tuple[set[int], int, int]] = {}
    for job in engine.jobs.values():
        if job.state is JobState.PENDING:
            continue
        for s in job.slices:
            gpus, cpus, mem = used.get(s.node, (set(), 0, 0))
            gpus.update(s.gpus)
            used[s.node] = (gpus, cpus + s.cpus, mem + s.mem_mib)
    return used


def build_snapshot(engine: Engine, now: float, exclude: set[int] = frozenset()) -> Snapshot:
    used = node_usage(engine)
    nodes = []
    for node in engine.nodes.values():
        gpus, cpus, mem = used.get(node.name, (set(), 0, 0))
        nodes.append(NodeView(
            name=node.name, gpus=node.gpus, cpus=node.cpus, mem_mib=node.mem_mib,
            free_gpus=frozenset(g.index for g in node.gpus) - gpus,
            free_cpus=node.cpus - cpus, free_mem_mib=node.mem_mib - mem,
            partitions=node.partitions, schedulable=node.up and not node.drain,
        ))
    pending = engine.views.pending
    if exclude:
        waiting = tuple(v for job_id, v in pending.items() if job_id not in exclude)
    else:
        waiting = tuple(pending.values())
    return Snapshot(
        now=now, nodes=tuple(nodes), partitions=tuple(p.core() for p in engine.config.partitions),
        running=tuple(engine.views.running.values()), pending=waiting,
        queues=engine.tenancy.queues, reservations=engine.reservations.core(),
    )
