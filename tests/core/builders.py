"""Small builders for scheduler inputs: node("n1", gpus=8), job(1, nodes=2, gpus=4), snapshot(...)."""
from __future__ import annotations

from corral.core.model import Gpu, NodeSlice, NodeView, Partition, PendingJob, Request, RunningJob
from corral.core.snapshot import Snapshot

NOW = 1_000_000.0


def node(name: str, gpus: int = 8, cpus: int = 64, mem_mib: int = 512_000, partitions=("gpu",),
         busy_gpus=(), busy_cpus: int = 0, busy_mem_mib: int = 0, schedulable: bool = True,
         domains: int = 2) -> NodeView:
    per_domain = max(1, gpus // max(1, domains))
    devices = tuple(Gpu(index=i, domain=f"nvl{i // per_domain}") for i in range(gpus))
    return NodeView(
        name=name, gpus=devices, cpus=cpus, mem_mib=mem_mib,
        free_gpus=frozenset(range(gpus)) - frozenset(busy_gpus),
        free_cpus=cpus - busy_cpus, free_mem_mib=mem_mib - busy_mem_mib,
        partitions=frozenset(partitions), schedulable=schedulable,
    )


def job(job_id: int, nodes: int = 1, gpus: int = 1, cpus: int = 1, mem_mib: int = 0, limit_s: int = 3600,
        priority: int = 0, submit: float | None = None, partition: str = "gpu", tasks: int = 1,
        held: bool = False, **more) -> PendingJob:
    req = Request(num_nodes=nodes, tasks_per_node=tasks, gpus_per_node=gpus, cpus_per_task=cpus,
                  mem_per_node_mib=mem_mib, time_limit_s=limit_s, partition=partition)
    if "nodes_allowed" in more:  # PendingJob.nodes: `nodes` here is the node count
        more["nodes"] = more.pop("nodes_allowed")
    return PendingJob(id=job_id, priority=priority, submit_time=NOW - 1000 + job_id if submit is None else submit,
                      request=req, held=held, **more)


def running(job_id: int, ends_in_s: float, *slices: tuple[str, tuple[int, ...]], cpus: int = 1,
            mem_mib: int = 0, **more) -> RunningJob:
    more.setdefault("start_time", NOW - 100)
    return RunningJob(id=job_id, expected_end=NOW + ends_in_s,
                      slices=tuple(NodeSlice(n, g, cpus, mem_mib) for n, g in slices), **more)


def busy_nodes(nodes: list[NodeView], runs: list[RunningJob]) -> tuple[NodeView, ...]:
    """Mark the running jobs' devices, cpus and memory as used on the node views."""
    out = []
    for view in nodes:
        used = [s for r in runs for s in r.slices if s.node == view.name]
        gpus = {g for s in used for g in s.gpus}
        out.append(NodeView(
            name=view.name, gpus=view.gpus, cpus=view.cpus, mem_mib=view.mem_mib,
            free_gpus=view.free_gpus - gpus, free_cpus=view.free_cpus - sum(s.cpus for s in used),
            free_mem_mib=view.free_mem_mib - sum(s.mem_mib for s in used), partitions=view.partitions,
            schedulable=view.schedulable))
    return tuple(out)


def snapshot(nodes, pending=(), runs=(), partitions=None, now: float = NOW, queues=(), reservations=()) -> Snapshot:
    parts = partitions or (Partition("gpu", max_time_s=7 * 86400, default=True),)
    return Snapshot(now=now, nodes=busy_nodes(list(nodes), list(runs)), partitions=tuple(parts),
                    running=tuple(runs), pending=tuple(pending), queues=tuple(queues),
                    reservations=tuple(reservations))
