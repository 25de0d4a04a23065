"""The simulator's workload and cluster data model: plain, immutable, JSON-serializable.

A `Workload` is what the trace readers produce and what the simulator replays: jobs with a submit
offset, a real runtime and a gang shape (every node of a job gets the same slice, as in
`corral.core.model.Request`). A `Cluster` is the set of nodes a trace was recorded on, with the
queue (virtual cluster, partition) each node belongs to; its per-queue GPU counts are the tenants'
entitlements in the metrics.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

GPU_MILLI_WHOLE = 1000


@dataclass(frozen=True, slots=True)
class TraceJob:
    id: int
    submit_s: float  # seconds from the workload's origin (trace or window start)
    duration_s: float  # real runtime; the job ends this long after it starts
    num_nodes: int
    gpus_per_node: int
    gpu_milli: int  # per-GPU share; 1000 = whole GPUs, < 1000 only for a single shared GPU
    cpus_per_node: int
    mem_per_node_mib: int
    gpu_model: str | None  # constraint; "A|B" lists alternatives (openb's gpu_spec); None: any
    user: str
    account: str
    queue: str  # virtual cluster / partition / QoS class: the tenant the job is charged to
    time_limit_s: int | None  # None: the trace does not say (see corral.sim.limits)
    priority: int = 0
    name: str = ""
    # Exact CPU request when the trace has fractions of a CPU (openb); None: cpus_per_node * 1000.
    cpu_milli_per_node: int | None = None

    def __post_init__(self) -> None:
        problems = _shape_problems(self)
        if problems:
            raise ValueError(f"job {self.id}: " + "; ".join(problems))

    @property
    def total_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def total_gpu_milli(self) -> int:
        return self.total_gpus * self.gpu_milli

    @property
    def gpu_seconds(self) -> float:
        """GPU time the job uses if it runs to completion (fractional GPUs count their share)."""
        return self.duration_s * self.total_gpu_milli / GPU_MILLI_WHOLE

    @property
    def allowed_gpu_models(self) -> frozenset[str] | None:
        if not self.gpu_model:
            return None
        return frozenset(m for m in self.gpu_model.split("|") if m)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceJob:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _shape_problems(job: TraceJob) -> list[str]:
    problems = []
    if job.num_nodes < 1:
        problems.append(f"num_nodes {job.num_nodes} < 1")
    if job.gpus_per_node < 0 or job.cpus_per_node < 0 or job.mem_per_node_mib < 0:
        problems.append("negative resource request")
    if not 0 <= job.gpu_milli <= GPU_MILLI_WHOLE:
        problems.append(f"gpu_milli {job.gpu_milli} outside 0..1000")
    if job.gpu_milli < GPU_MILLI_WHOLE and job.gpu_milli > 0 and job.total_gpus != 1:
        problems.append("a fractional GPU share needs exactly one GPU")
    if not job.duration_s >= 0:  # also catches NaN
        problems.append(f"duration_s {job.duration_s} < 0")
    if job.time_limit_s is not None and job.time_limit_s <= 0:
        problems.append(f"time_limit_s {job.time_limit_s} <= 0")
    return problems


@dataclass(frozen=True)
class Workload:
    jobs: tuple[TraceJob, ...]
    name: str
    source: str  # provenance: file, filters, the reader's choices
    # Wall-clock time (seconds since the epoch) of submit_s == 0, when the trace has real dates.
    origin_epoch_s: float | None = None
    # Caveats a report must carry: how shapes were derived, what was skipped and why.
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Replay order is submission order; the id breaks ties so that order is total.
        ordered = tuple(sorted(self.jobs, key=lambda j: (j.submit_s, j.id)))
        object.__setattr__(self, "jobs", ordered)
        object.__setattr__(self, "notes", tuple(self.notes))
        ids = {j.id for j in ordered}
        if len(ids) != len(ordered):
            raise ValueError(f"workload {self.name!r}: job ids are not unique")

    def __len__(self) -> int:
        return len(self.jobs)

    def with_jobs(self, jobs: Iterable[TraceJob], note: str | None = None) -> Workload:
        notes = self.notes + ((note,) if note else ())
        return replace(self, jobs=tuple(jobs), notes=notes)

    def filter(self, keep: Callable[[TraceJob], bool], note: str | None = None) -> Workload:
        return self.with_jobs((j for j in self.jobs if keep(j)), note)

    def head(self, count: int) -> Workload:
        return self.with_jobs(self.jobs[:count], f"first {count} jobs by submit time")

    @property
    def span_s(self) -> float:
        return self.jobs[-1].submit_s - self.jobs[0].submit_s if self.jobs else 0.0

    def queues(self) -> list[str]:
        return sorted({j.queue for j in self.jobs})

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "jobs": len(self.jobs),
            "queues": len(self.queues()),
            "span_s": self.span_s,
            "gpu_hours": sum(j.gpu_seconds for j in self.jobs) / 3600.0,
            "with_time_limit": sum(1 for j in self.jobs if j.time_limit_s is not None),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "origin_epoch_s": self.origin_epoch_s,
            "notes": list(self.notes),
            "jobs": [j.to_dict() for j in self.jobs],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        return cls(
            jobs=tuple(TraceJob.from_dict(j) for j in data["jobs"]),
            name=data["name"],
            source=data.get("source", ""),
            origin_epoch_s=data.get("origin_epoch_s"),
            notes=tuple(data.get("notes", ())),
        )


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    gpus: int
    cpus: int
    mem_mib: int
    gpu_model: str | None = None
    queue: str | None = None  # the virtual cluster / partition owning the node; None: shared
    cpu_milli: int | None = None  # exact CPU capacity when the trace gives it; None: cpus * 1000


@dataclass(frozen=True)
class Cluster:
    name: str
    nodes: tuple[NodeSpec, ...]
    source: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def queue_gpus(self) -> dict[str, int]:
        """GPUs owned per queue: the entitlements the metrics compare usage with."""
        out: dict[str, int] = {}
        for node in self.nodes:
            if node.queue is not None:
                out[node.queue] = out.get(node.queue, 0) + node.gpus
        return out

    def queue_nodes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for node in self.nodes:
            if node.queue is not None:
                out[node.queue] = out.get(node.queue, 0) + 1
        return out

    @classmethod
    def uniform(cls, name: str, queue_nodes: dict[str, int], *, gpus_per_node: int, cpus_per_node: int,
                mem_per_node_mib: int, gpu_model: str | None = None, source: str = "") -> Cluster:
        """Identical nodes, `queue_nodes[q]` of them per queue, named `<queue>-NNNN`."""
        nodes = tuple(
            NodeSpec(f"{queue}-{i:04d}", gpus_per_node, cpus_per_node, mem_per_node_mib, gpu_model, queue)
            for queue, count in queue_nodes.items()
            for i in range(count)
        )
        return cls(name, nodes, source)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "notes": list(self.notes),
                "nodes": [asdict(n) for n in self.nodes]}
