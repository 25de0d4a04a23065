"""Immutable inputs and outputs of one scheduling cycle.

Everything here is plain data. The core never reads a clock: `now` is passed in, and every time is
seconds since the epoch as a float.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    model: str = "sim-gpu"
    memory_mib: int = 0
    # GPUs with the same domain share an NVLink island (or a PCIe switch when no NVLink);
    # placement keeps a task's devices inside one domain when it can. None: unknown topology.
    domain: str | None = None


class NodeHealth(str, Enum):
    UP = "up"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as the scheduler sees it for one cycle."""

    name: str
    gpus: tuple[Gpu, ...]
    cpus: int
    mem_mib: int
    free_gpus: frozenset[int]
    free_cpus: int
    free_mem_mib: int
    partitions: frozenset[str]
    # False for down, draining and drained nodes: nothing new starts there.
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    max_time_s: int | None = None  # None: unlimited
    default: bool = False
    up: bool = True


@dataclass(frozen=True, slots=True)
class Request:
    """A job's normalized resource request: every node of the gang gets the same slice."""

    num_nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 1
    mem_per_node_mib: int = 0
    time_limit_s: int = 3600
    partition: str = ""
    # What decides whether a job fits somewhere right now (the time limit does not). Derived once:
    # the scheduler reads it for every pending job in every cycle.
    shape: tuple[int, int, int, int, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        shape = (self.num_nodes, self.gpus_per_node, self.cpus_per_node, self.mem_per_node_mib, self.partition)
        object.__setattr__(self, "shape", shape)

    @property
    def cpus_per_node(self) -> int:
        return self.tasks_per_node * self.cpus_per_task

    @property
    def total_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node


@dataclass(frozen=True, slots=True)
class NodeSlice:
    """What one job holds on one node."""

    node: str
    gpus: tuple[int, ...]
    cpus: int
    mem_mib: int


@dataclass(frozen=True, slots=True)
class PendingJob:
    id: int
    priority: int
    submit_time: float
    request: Request
    held: bool = False
    # Priority order: higher priority first, then earlier submission, then lower id.
    order: tuple[int, float, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", (-self.priority, self.submit_time, self.id))


@dataclass(frozen=True, slots=True)
class RunningJob:
    id: int
    # When the job's resources are expected back: start + time limit (or the kill deadline once
    # it is completing). Backfill plans with this.
    expected_end: float
    slices: tuple[NodeSlice, ...]


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    # How many blocked jobs, in priority order, get a reservation in the backfill timeline.
    # 1 is EASY backfill; larger values are closer to conservative backfill.
    max_reservations: int = 8
    # Backfill stops looking at pending jobs after this many (Slurm's bf_max_job_test); None: all.
    max_jobs_considered: int | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[NodeView, ...]
    partitions: tuple[Partition, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]


class Reason(str, Enum):
    """Why a job is not running, with Slurm's names."""

    NONE = "None"
    PRIORITY = "Priority"
    RESOURCES = "Resources"
    PARTITION_TIME_LIMIT = "PartitionTimeLimit"
    PARTITION_NODE_LIMIT = "PartitionNodeLimit"
    PARTITION_DOWN = "PartitionDown"
    REQ_NODE_NOT_AVAIL = "ReqNodeNotAvail"
    INVALID_PARTITION = "InvalidPartition"
    HELD = "JobHeldUser"
    # Set by the controller, not the core:
    BEGIN_TIME = "BeginTime"
    NODE_DOWN = "NodeDown"


@dataclass(frozen=True, slots=True)
class Start:
    job_id: int
    slices: tuple[NodeSlice, ...]


@dataclass(frozen=True, slots=True)
class Waiting:
    job_id: int
    reason: Reason
    # Earliest start the backfill timeline promises (only for jobs holding a reservation).
    estimated_start: float | None = None
    # Nodes the reservation holds, for explanations.
    reserved_nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CyclePlan:
    starts: tuple[Start, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    stats: dict[str, int] = field(default_factory=dict)
