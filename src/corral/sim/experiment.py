"""Experiments: a cluster description and a workload through the simulator, under a named policy.

A policy is configuration of the production engine, nothing more: partitions (isolated virtual
clusters) or one partition with queues in a cohort (lending and reclaiming), strict FIFO or backfill
with reservations, and priority weights.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral import hostlist
from corral.api.schemas import JobSubmit
from corral.api.tenancy import TenancySpec
from corral.core.config import SchedulerConfig
from corral.engine.config import EngineConfig, PartitionConfig
from corral.engine.history import Requeued
from corral.engine.records import JobState
from corral.sim.driver import SimNode, SimSubmission, Simulation
from corral.sim.metrics import JobResult, SimMetrics, compute_metrics
from corral.sim.workload import Cluster, TraceJob, Workload


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    isolated: bool  # True: each queue has its own nodes (a partition); False: queues share a cohort
    backfill: bool
    max_reservations: int = 8
    weight_age: int = 1000
    weight_fairshare: int = 0
    weight_job_size: int = 0
    favor_small: bool = False

    def describe(self) -> str:
        layout = ("each VC isolated on its own nodes (one partition per VC)" if self.isolated else
                  "all nodes shared; each VC a queue with nominal quota = its GPUs, in one cohort, lending "
                  "idle quota and reclaiming it by preemption (requeue)")
        order = (f"backfill with {self.max_reservations} reservations" if self.backfill
                 else "strict FIFO per partition (no backfill)")
        size = (f", job size={self.weight_job_size} favouring small requested GPU time (GPUs x time limit, log "
                f"scale)" if self.favor_small else "")
        return f"{self.name}: {layout}; {order}; multifactor priority weights age={self.weight_age} (max age 7 d), " \
               f"fairshare={self.weight_fairshare}{size}"


@dataclass
class Outcome:
    policy: Policy
    results: list[JobResult]
    metrics: SimMetrics
    wall_s: float
    cycles: int
    unfinished: int
    refused: dict[int, str] = field(default_factory=dict)  # trace job id -> why the engine refused it


def run_experiment(cluster: Cluster, workload: Workload, policy: Policy, *, stop_delay_s: float = 0.0,
                   min_cycle_interval_s: float = 0.0, progress: Callable[[int, int], None] | None = None) -> Outcome:
    started = time.perf_counter()
    config, tenancy = _engine_setup(cluster, policy)
    tenancy = _with_trace_users(tenancy, workload)
    sim = Simulation(config, [SimNode(n.name, n.gpus, n.cpus, n.mem_mib) for n in cluster.nodes], tenancy,
                     stop_delay_s=stop_delay_s, min_cycle_interval_s=min_cycle_interval_s)
    sim.submit(_submission(job, policy) for job in workload.jobs)
    total = len(workload.jobs)
    sim.run(on_progress=(lambda _now: progress(len(sim.result.finished), total)) if progress else None)
    by_id = {job_id: workload.jobs[i] for i, job_id in sim.result.ids.items()}
    results = [_result(job, by_id[job.id]) for job in sim.result.finished if job.state is JobState.COMPLETED]
    metrics = compute_metrics(results, cluster.total_gpus, entitlements=cluster.queue_gpus())
    refused = {workload.jobs[i].id: why for i, why in sim.result.refused.items()}
    return Outcome(policy, results, metrics, time.perf_counter() - started, sim.result.cycles,
                   total - len(results), refused)


def _engine_setup(cluster: Cluster, policy: Policy) -> tuple[EngineConfig, TenancySpec]:
    sched = SchedulerConfig(max_reservations=policy.max_reservations, backfill=policy.backfill)
    queues = cluster.queue_gpus()
    priority: dict[str, Any] = {"weight_age": policy.weight_age, "weight_fairshare": policy.weight_fairshare,
                "weight_job_size": policy.weight_job_size, "max_age_s": 7 * 86400, "calc_period_s": 300}
    if policy.favor_small:
        # Slurm's PriorityFavorSmall, with size = GPUs x the time limit the user asked for (no oracle).
        priority.update(job_size_basis="gpu_time", favor_small=True)
    accounts = [{"name": q} for q in queues]
    if policy.isolated:
        parts = tuple(PartitionConfig(q, nodes=hostlist.compress([n.name for n in cluster.nodes if n.queue == q]))
                      for q in queues)
        tenancy = TenancySpec(priority=priority)
    else:
        parts = (PartitionConfig("gpu", default=True),)
        tenancy = TenancySpec(
            accounts=accounts, users=[{"name": q, "accounts": [q]} for q in queues],
            queues=[{"name": q, "cohort": "all", "accounts": [q], "nominal": {"gpu": g}} for q, g in queues.items()],
            priority=priority)
    return EngineConfig(partitions=parts, scheduler=sched, kill_grace_s=0.0), tenancy


def _with_trace_users(tenancy: TenancySpec, workload: Workload) -> TenancySpec:
    """With accounts configured, the controller refuses a user without an association: each of the trace's
    users gets the accounts (queues) its jobs are charged to."""
    accounts = {a.name for a in tenancy.accounts}
    if not accounts:
        return tenancy  # open: anyone submits, to the `default` account
    users = {u.name: set(u.accounts) for u in tenancy.users}
    for job in workload.jobs:
        if job.queue in accounts:
            users.setdefault(job.user, set()).add(job.queue)
    listed = [{"name": name, "accounts": sorted(names)} for name, names in sorted(users.items())]
    return TenancySpec(**{**tenancy.model_dump(), "users": listed})


def _submission(job: TraceJob, policy: Policy) -> SimSubmission:
    """The trace job as a user would submit it: admitted, it is the gang the trace recorded (tasks_per_node
    1, cpus_per_node CPUs per task), the trace's time limit or the runtime plus a second."""
    limit = job.time_limit_s or int(job.duration_s) + 1
    request = JobSubmit(name=job.name or f"job{job.id}", user=job.user if not policy.isolated else "u",
                        argv=["true"], workdir="/", nodes=job.num_nodes, gpus_per_node=job.gpus_per_node,
                        cpus_per_task=job.cpus_per_node, mem_mib=job.mem_per_node_mib, time_limit_s=limit,
                        partition=job.queue if policy.isolated else "gpu",
                        account="default" if policy.isolated else job.queue, qos="normal",
                        queue=None if policy.isolated else job.queue)
    return SimSubmission(job.submit_s, request, job.duration_s)


def _result(engine_job, trace_job: TraceJob) -> JobResult:
    # The engine's own run times, as untyped as `engine_job` (a requeued run had started).
    runs: list[tuple[Any, Any]] = [(h.run_start, h.run_end) for h in engine_job.history if isinstance(h, Requeued)]
    runs.append((engine_job.start_time, engine_job.end_time))
    first = runs[0][0]
    return JobResult(trace_job, first, engine_job.end_time, tuple(engine_job.node_names),
                     preemptions=len(runs) - 1, segments=tuple(runs) if len(runs) > 1 else ())
