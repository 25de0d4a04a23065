"""Metrics of a finished replay: job completion time (JCT) and queueing delay statistics, overall,
per queue and per job size; makespan; GPU utilization and queue length over time; each tenant's
GPU-hours against its entitlement; preemptions; fragmentation when snapshots are given.

Definitions (all times in seconds):
- wait = start - submit; JCT = end - submit (so JCT includes the wait).
- makespan = last end - first submit; the utilization and queue series span that window.
- utilization(t) = GPUs held at t / capacity; a job holds its GPUs over its running segments.
- queue length(t) = jobs submitted and not running at t (before their first start, or requeued
  between running segments after a preemption).
- a tenant is a queue (VC / partition); its entitlement is the GPUs it owns (Cluster.queue_gpus()).
Percentiles interpolate linearly between order statistics (numpy's default).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from corral.sim.fragmentation import ClusterSnapshot, fragmentation_series, task_mix
from corral.sim.series import StepSeries
from corral.sim.workload import GPU_MILLI_WHOLE, TraceJob

# Job-size buckets by total GPUs (the Helios/Philly analyses' grouping), as (name, upper bound);
# "0" = CPU-only, "<1" = a share of one GPU (openb).
SIZE_BUCKETS: tuple[tuple[str, float], ...] = (
    ("0", 0), ("<1", 1 - 1e-9), ("1", 1), ("2-4", 4), ("5-8", 8), ("9-32", 32), (">32", float("inf")),
)


@dataclass(frozen=True, slots=True)
class JobResult:
    job: TraceJob
    start_s: float  # first start
    end_s: float
    nodes: tuple[str, ...] = ()
    gpus: float | None = None  # GPUs held (a share counts as its fraction); None: as the job asked
    preemptions: int = 0
    # Running intervals when the job was preempted and restarted; empty: one run [start_s, end_s].
    segments: tuple[tuple[float, float], ...] = ()

    @property
    def held_gpus(self) -> float:
        return self.gpus if self.gpus is not None else self.job.total_gpu_milli / GPU_MILLI_WHOLE

    @property
    def wait_s(self) -> float:
        return self.start_s - self.job.submit_s

    @property
    def jct_s(self) -> float:
        return self.end_s - self.job.submit_s

    def runs(self) -> tuple[tuple[float, float], ...]:
        return self.segments or ((self.start_s, self.end_s),)

    @property
    def gpu_seconds(self) -> float:
        return self.held_gpus * sum(end - start for start, end in self.runs())


@dataclass(frozen=True)
class Stats:
    count: int
    mean: float
    median: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        if not values:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0)
        array = np.asarray(values, dtype=float)
        p50, p95, p99 = np.percentile(array, [50, 95, 99])
        return cls(len(array), float(array.mean()), float(p50), float(p95), float(p99), float(array.max()))


@dataclass(frozen=True)
class GroupMetrics:
    jct_s: Stats
    wait_s: Stats


@dataclass(frozen=True)
class TenantShare:
    gpu_hours: float
    usage_share: float  # of all GPU-hours used
    entitled_gpus: int
    entitled_share: float  # of all entitled GPUs
    # usage_share / entitled_share: 1 = used exactly its share; None without an entitlement.
    usage_vs_entitlement: float | None
    # GPU-hours / (entitled GPUs x makespan): how much of its own capacity the tenant used.
    entitlement_used: float | None
    preemptions: int


@dataclass(frozen=True)
class SimMetrics:
    jobs: int
    gpu_capacity: float
    makespan_s: float
    overall: GroupMetrics
    by_queue: dict[str, GroupMetrics]
    by_size: dict[str, GroupMetrics]
    utilization: StepSeries  # fraction of GPU capacity in use
    mean_utilization: float
    queue_length: StepSeries
    mean_queue_length: float
    tenants: dict[str, TenantShare]
    preemptions: int
    fragmentation: list[dict[str, float]] = field(default_factory=list)

    def to_dict(self, *, series_points: int | None = 2000) -> dict[str, Any]:
        """JSON-ready; long series are resampled to `series_points` time-weighted bins (None: all)."""
        if series_points:
            return asdict(replace(self, utilization=self.utilization.resample(series_points),
                                  queue_length=self.queue_length.resample(series_points)))
        return asdict(self)


def size_bucket(total_gpus: float) -> str:
    for name, upper in SIZE_BUCKETS:
        if total_gpus <= upper:
            return name
    return SIZE_BUCKETS[-1][0]


def compute_metrics(results: Iterable[JobResult], gpu_capacity: float, *,
                    entitlements: Mapping[str, int] | None = None,
                    snapshots: Iterable[ClusterSnapshot] | None = None) -> SimMetrics:
    """All metrics of one replay. `gpu_capacity` in GPUs; `entitlements`: queue -> GPUs owned."""
    done = list(results)
    _check(done, gpu_capacity)
    start_s = min((r.job.submit_s for r in done), default=0.0)
    end_s = max((r.end_s for r in done), default=start_s)
    utilization = _gpus_in_use(done, start_s, end_s).scaled(1.0 / gpu_capacity)
    queue = _queue_length(done, start_s, end_s)
    frag = []
    if snapshots is not None:
        points = fragmentation_series(snapshots, task_mix(r.job for r in done))
        frag = [{"time_s": p.time_s, "free_gpu_milli": p.free_gpu_milli, "frag_gpu_milli": p.frag_gpu_milli,
                 "frag_pct_of_free": p.frag_pct_of_free} for p in points]
    return SimMetrics(
        jobs=len(done), gpu_capacity=gpu_capacity, makespan_s=end_s - start_s, overall=_group(done),
        by_queue=_grouped(done, lambda r: r.job.queue),
        by_size=_grouped(done, lambda r: size_bucket(r.job.total_gpu_milli / GPU_MILLI_WHOLE)),
        utilization=utilization, mean_utilization=utilization.mean(), queue_length=queue,
        mean_queue_length=queue.mean(), tenants=tenant_shares(done, entitlements or {}, end_s - start_s),
        preemptions=sum(r.preemptions for r in done), fragmentation=frag,
    )


def _check(done: list[JobResult], gpu_capacity: float) -> None:
    if gpu_capacity <= 0:
        raise ValueError(f"gpu_capacity {gpu_capacity} <= 0")
    for r in done:
        if not r.job.submit_s <= r.start_s <= r.end_s:
            raise ValueError(f"job {r.job.id}: submit {r.job.submit_s}, start {r.start_s}, end {r.end_s} "
                             f"out of order")


def _group(done: list[JobResult]) -> GroupMetrics:
    return GroupMetrics(Stats.of([r.jct_s for r in done]), Stats.of([r.wait_s for r in done]))


def _grouped(done: list[JobResult], key) -> dict[str, GroupMetrics]:
    groups: dict[str, list[JobResult]] = {}
    for r in done:
        groups.setdefault(key(r), []).append(r)
    order = [name for name, _ in SIZE_BUCKETS]
    names = sorted(groups, key=lambda n: (order.index(n) if n in order else len(order), n))
    return {name: _group(groups[name]) for name in names}


def _gpus_in_use(done: list[JobResult], start_s: float, end_s: float) -> StepSeries:
    events = [(t, sign * r.held_gpus) for r in done for run in r.runs() for t, sign in zip(run, (1, -1), strict=True)]
    return StepSeries.from_events(events, start_s=start_s, end_s=end_s)


def _queue_length(done: list[JobResult], start_s: float, end_s: float) -> StepSeries:
    events = []
    for r in done:
        runs = r.runs()
        events.append((r.job.submit_s, 1.0))
        events += [(run_start, -1.0) for run_start, _ in runs]
        events += [(run_end, 1.0) for _, run_end in runs[:-1]]  # preempted: waiting again
    return StepSeries.from_events(events, start_s=start_s, end_s=end_s)


def tenant_shares(done: Iterable[JobResult], entitlements: Mapping[str, int],
                  window_s: float) -> dict[str, TenantShare]:
    gpu_seconds: dict[str, float] = {q: 0.0 for q in entitlements}
    preemptions: dict[str, int] = {q: 0 for q in entitlements}
    for r in done:
        gpu_seconds[r.job.queue] = gpu_seconds.get(r.job.queue, 0.0) + r.gpu_seconds
        preemptions[r.job.queue] = preemptions.get(r.job.queue, 0) + r.preemptions
    used_total = sum(gpu_seconds.values())
    entitled_total = sum(entitlements.values())
    out = {}
    for queue in sorted(gpu_seconds):
        usage_share = gpu_seconds[queue] / used_total if used_total else 0.0
        entitled = entitlements.get(queue, 0)
        entitled_share = entitled / entitled_total if entitled_total else 0.0
        out[queue] = TenantShare(
            gpu_hours=gpu_seconds[queue] / 3600.0, usage_share=usage_share, entitled_gpus=entitled,
            entitled_share=entitled_share,
            usage_vs_entitlement=usage_share / entitled_share if entitled_share else None,
            entitlement_used=gpu_seconds[queue] / (entitled * window_s) if entitled and window_s > 0 else None,
            preemptions=preemptions[queue],
        )
    return out
