"""Immutable inputs and outputs of one scheduling cycle: what a `Snapshot` (core/snapshot.py) holds and what a
`CyclePlan` says.

Everything here is plain data, and this module imports nothing of the core (every core module may use it).
The core never reads a clock: `now` is passed in, and every time is seconds since the epoch as a float.
"""
from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

GPU_MILLI = 1000  # one whole GPU in milli-GPU

# Equal request shapes, and equal deep keys of plain jobs, share one object. A cycle walks 100,000 pending jobs
# in priority order, scattered in memory: a key shared by thousands of jobs stays in the CPU's cache, one per
# job is a cache miss per job (about half of the walk's time). Sharing changes no equality, so clearing the
# table when it is full (it is only a speed-up) is safe.
_SHARED: dict[object, object] = {}
_SHARED_MAX = 65536
_Key = TypeVar("_Key")


def _shared(key: _Key) -> _Key:
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        found = _SHARED[key] = key
    return found  # type: ignore[return-value]  # equal to key: the one object kept for it


class DeepKey:
    """What decides a plain job's fate deep in a long queue: its shape and time limit (core/cycle.py:
    Cycle._consider_deep). Hashed by identity (fast), and shared by every plain job with the same pair."""

    __slots__ = ("shape", "time_limit_s")

    def __init__(self, shape: tuple[int, int, int, int, str, str, int], time_limit_s: int) -> None:
        self.shape, self.time_limit_s = shape, time_limit_s


def _deep_key(shape: tuple[int, int, int, int, str, str, int], time_limit_s: int) -> DeepKey:
    pair = (shape, time_limit_s)
    found = _SHARED.get(pair)
    if found is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        found = _SHARED[pair] = DeepKey(shape, time_limit_s)
    assert isinstance(found, DeepKey)
    return found


@dataclass(frozen=True, slots=True)
class TaskShape:
    """A typical task of the target workload (for fragmentation-aware placement): GPUs per node, the share
    of each in milli-GPU, CPUs (in the cluster's CPU unit), and its GPU model constraint."""

    gpus: int
    gpu_milli: int = GPU_MILLI
    cpus: int = 0
    gpu_model: str = ""


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
    # GPUs shared by fractional jobs: (index, milli-GPU in use, 1..999). They are not in free_gpus;
    # a fraction may still go there, a whole-GPU request may not.
    shared_gpus: tuple[tuple[int, int], ...] = ()


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
    gpu_model: str = ""  # a GPU model constraint ("" = any; "A|B": any of them)
    # Share of each GPU in milli-GPU: 1000 = whole GPUs; 1..999 = a fraction of one GPU per node
    # (then gpus_per_node must be 1), packed onto a device with that much left.
    gpu_milli: int = GPU_MILLI
    # What decides whether a job fits somewhere right now (the time limit does not). Derived once:
    # the scheduler reads it for every pending job in every cycle.
    shape: tuple[int, int, int, int, str, str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.gpu_milli != GPU_MILLI and not (0 < self.gpu_milli < GPU_MILLI and self.gpus_per_node == 1):
            raise ValueError(f"gpu_milli {self.gpu_milli}: a fraction (1..999) of exactly one GPU per node, "
                             f"or 1000 for whole GPUs")
        shape = (self.num_nodes, self.gpus_per_node, self.cpus_per_node, self.mem_per_node_mib, self.partition,
                 self.gpu_model, self.gpu_milli)
        object.__setattr__(self, "shape", _shared(shape))

    @property
    def cpus_per_node(self) -> int:
        return self.tasks_per_node * self.cpus_per_task

    @property
    def total_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def gpu_amount(self) -> int | float:
        """GPUs for quota and limits: a fraction counts as milli / 1000 of a GPU."""
        if self.gpu_milli == GPU_MILLI:
            return self.num_nodes * self.gpus_per_node
        return self.num_nodes * self.gpus_per_node * self.gpu_milli / GPU_MILLI


@dataclass(frozen=True, slots=True)
class NodeSlice:
    """What one job holds on one node: whole devices, or (gpu_milli < 1000) a share of one device."""

    node: str
    gpus: tuple[int, ...]
    cpus: int
    mem_mib: int
    gpu_milli: int = 1000


@dataclass(frozen=True, slots=True)
class Cap:
    """A counted limit a job is subject to: it may start only while used[key] + amount <= limit.
    Running jobs charge the same keys (RunningJob.charges), so one mechanism covers per-user and
    per-account job and GPU limits and array throttles."""

    key: str
    limit: int
    amount: int
    reason: "Reason"


_FLOAT_BITS, _SIGNED_BITS = struct.Struct("<d"), struct.Struct("<q")
_LOW_63 = (1 << 63) - 1


def order_key(rank: int, priority: int, submit_time: float, job_id: int) -> int:
    """An int that orders as the tuple (rank, -priority, submit_time, job_id) does: four 64-bit fields,
    the rank's highest. The priority must fit a signed 64-bit int and the id an unsigned one (the engine's
    are 32-bit); the submission time is any float but NaN, laid out by its IEEE-754 bits so that the ints
    order as the floats do (-0.0 and 0.0 alike)."""
    if not -(1 << 63) <= priority <= _LOW_63:
        raise ValueError(f"job {job_id}: priority {priority} is outside a signed 64-bit integer")
    if not 0 <= job_id < 1 << 64:
        raise ValueError(f"job id {job_id} is outside an unsigned 64-bit integer")
    if submit_time != submit_time:
        raise ValueError(f"job {job_id}: submission time is NaN")
    bits: int = _SIGNED_BITS.unpack(_FLOAT_BITS.pack(submit_time))[0]
    time_field = (bits if bits >= 0 else -(bits & _LOW_63)) + (1 << 63)
    return (((((rank << 64) | (_LOW_63 - priority)) << 64) | time_field) << 64) | job_id


@dataclass(frozen=True, slots=True)
class PendingJob:
    id: int
    priority: int
    submit_time: float
    request: Request
    held: bool = False
    user: str = ""
    account: str = ""
    queue: str = ""  # the quota queue it is charged to ("" = none)
    qos: str = ""
    caps: tuple[Cap, ...] = ()
    # QOS names whose running jobs this job may preempt.
    preempts_qos: frozenset[str] = frozenset()
    reservation: str = ""  # the advance reservation it must run in ("" = none)
    # It has preempted jobs and waits for them to exit: it goes first, so that what its victims free
    # is not taken by anyone else (its requeued victims included).
    claim: bool = False
    # Requeued after a node failure with --requeue=expedite: it goes before everything, claims included
    # (Slurm's expedited requeue: the highest priority job in the system).
    expedited: bool = False
    # Its QOS may take running jobs past their group's disruption budget (Snapshot.disruption_budgets).
    ignores_budgets: bool = False
    # At most this many running jobs of its group (RunningJob.budget_group: a service's replicas) on one
    # node, itself included (0: no limit): the placement's anti-affinity.
    group: str = ""
    max_per_node: int = 0
    # Spread: at most ceil(spread_replicas / the partition's nodes that can take work now) of its group on one
    # node (0: no spread); counted at placement, so a lost node's replica moves to a live node.
    spread_replicas: int = 0
    # The nodes it may run on (sbatch -w, -x, --constraint, resolved by the engine); None: any node.
    nodes: frozenset[str] | None = None
    # The whole node (sbatch --exclusive): it starts only on idle nodes, takes all their GPUs, CPUs and
    # memory, so nothing else is placed beside it.
    exclusive: bool = False
    # Order: expedited jobs first, then claims, then higher priority, then earlier submission, then lower id.
    order: tuple[int, int, float, int] = field(init=False, repr=False, compare=False)
    # The same order as one int (order_key below): a sort compares two ints in one C call, where tuples
    # that mostly tie on their first fields cost several (core/scheduler.py: in_order).
    order_key: int = field(init=False, repr=False, compare=False)
    # Nothing but its request decides where and whether it starts: no hold, counted limit, quota queue,
    # preemption, advance reservation, node list, whole nodes or per-node limit. Deep in a long queue such a
    # job is decided by the cycle's memo alone (core/cycle.py: Cycle.consider_all).
    plain: bool = field(init=False, repr=False, compare=False)
    # A plain job's shape and time limit, shared with every plain job of the same pair (None: not plain).
    deep: DeepKey | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rank = 0 if self.expedited else 1 if self.claim else 2
        object.__setattr__(self, "order", (rank, -self.priority, self.submit_time, self.id))
        object.__setattr__(self, "order_key", order_key(rank, self.priority, self.submit_time, self.id))
        plain = not (self.held or self.caps or self.queue or self.preempts_qos or self.reservation
                     or self.nodes is not None or self.exclusive or self.max_per_node or self.spread_replicas)
        object.__setattr__(self, "plain", plain)
        req = self.request
        object.__setattr__(self, "deep", _deep_key(req.shape, req.time_limit_s) if plain else None)


@dataclass(frozen=True, slots=True)
class RunningJob:
    id: int
    # When the job's resources are expected back: start + time limit (or the kill deadline once
    # it is completing). Backfill plans with this.
    expected_end: float
    slices: tuple[NodeSlice, ...]
    priority: int = 0
    queue: str = ""
    qos: str = ""
    start_time: float = 0.0
    # From when it may be preempted (start + the QOS's minimum runtime); None: never.
    preemptible_from: float | None = None
    # (Cap key, amount) pairs it holds while it runs.
    charges: tuple[tuple[str, int], ...] = ()
    # Already being stopped (COMPLETING): its resources are about to come back.
    completing: bool = False
    gpu_model: str = ""  # the model of the GPUs it holds (its quota flavor)
    # Its group (a service's replicas): the disruption budget it counts against (Snapshot.disruption_budgets)
    # and whose jobs a node holds at most PendingJob.max_per_node of. "": none.
    budget_group: str = ""
    # What it holds, per quota resource; derived once (every cycle charges it to its queue).
    resources: dict[str, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        gpus = sum(len(s.gpus) if s.gpu_milli == GPU_MILLI else len(s.gpus) * s.gpu_milli / GPU_MILLI
                   for s in self.slices)
        out = {"gpu": gpus, "cpu": sum(s.cpus for s in self.slices), "mem_mib": sum(s.mem_mib for s in self.slices)}
        if self.gpu_model:
            out[f"gpu:{self.gpu_model}"] = gpus
        object.__setattr__(self, "resources", out)


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """A Kueue ClusterQueue: nominal quota per resource ("gpu", "cpu", "mem_mib", or "gpu:<model>" for a
    GPU-model flavor). In a cohort it lends what it does not use (at most `lending_limit`, default all of
    nominal) and borrows (at most `borrowing_limit` beyond nominal, default unlimited). Resources it does
    not list are not limited. With flavors, a job takes the first flavor (in the order listed) that has
    quota and room, and runs on nodes of that model."""

    name: str
    nominal: Mapping[str, int]
    cohort: str | None = None
    borrowing_limit: Mapping[str, int] = field(default_factory=dict)
    lending_limit: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AdvanceReservation:
    """Nodes set aside for [start, end): only jobs that name it run there (none if maintenance)."""

    name: str
    start: float
    end: float
    nodes: frozenset[str]
    maintenance: bool = False
    # A hold for one job (an expedited requeue keeps its healthy nodes): no other job runs there, and the
    # job that names it may also run on any other node (an advance reservation confines its jobs).
    holder: int | None = None


# "fgd+cpu": weight of CPU-stranded GPU capacity (chosen on openb seeds 52-56; see docs/results.md).
FGD_CPU_WEIGHT = 0.3


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
    QUEUE_QUOTA = "QueueQuota"
    ASSOC_MAX_JOBS = "AssocMaxJobsLimit"
    ASSOC_GRP_JOBS = "AssocGrpJobsLimit"
    ASSOC_GRP_GRES = "AssocGrpGRES"
    ARRAY_TASK_LIMIT = "JobArrayTaskLimit"
    RESERVATION = "Reservation"
    QOS_MAX_WALL = "QOSMaxWallDurationPerJobLimit"
    # Set by the engine before a job reaches the core:
    DEPENDENCY = "Dependency"
    DEPENDENCY_NEVER = "DependencyNeverSatisfied"
    BEGIN_TIME = "BeginTime"


@dataclass(frozen=True, slots=True)
class Start:
    job_id: int
    slices: tuple[NodeSlice, ...]


# Not frozen, though nothing changes one once made: CyclePlan.waiting makes one per waiting job (100,000 and
# more), and a frozen dataclass's __init__ (object.__setattr__ per field) costs five times a plain one's.
@dataclass(slots=True)
class Waiting:
    job_id: int
    reason: Reason
    # Earliest start the backfill timeline promises (only for jobs holding a reservation).
    estimated_start: float | None = None
    # Nodes the reservation holds, for explanations.
    reserved_nodes: tuple[str, ...] = ()
    # The limiting resource, quota or limit, in words.
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Preempt:
    victim_id: int
    preemptor_id: int
    # "reclaim": the preemptor's queue takes back nominal quota lent out; "priority": a QOS that
    # preempts the victim's.
    cause: str


@dataclass(frozen=True, slots=True)
class CyclePlan:
    starts: tuple[Start, ...] = ()
    # Why each job that does not start waits, in the order the cycle took them: the job's id, and its
    # record: the Reason alone when that is all there is to say (most of a long queue), else a Waiting with
    # a detail, an estimate or reserved nodes. A cycle over 100,000 pending jobs made a Waiting per job
    # before: about a tenth of its time (bench/cycle.py). `waiting` gives them all as Waiting records.
    waiting_ids: tuple[int, ...] = ()
    waiting_records: tuple[Reason | Waiting, ...] = ()
    preemptions: tuple[Preempt, ...] = ()
    stats: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.waiting_ids) != len(self.waiting_records):
            raise ValueError(f"{len(self.waiting_ids)} waiting job ids for {len(self.waiting_records)} records")

    @property
    def waiting(self) -> tuple[Waiting, ...]:
        """Every waiting job's record, in order (made on each call: `reasons` is the cheap way)."""
        return tuple(record if isinstance(record, Waiting) else Waiting(job_id, record)
                     for job_id, record in zip(self.waiting_ids, self.waiting_records, strict=True))

    def reasons(self) -> Iterator[tuple[int, Reason | Waiting]]:
        """(job id, Reason or Waiting) per waiting job, in order, without a record per job."""
        return zip(self.waiting_ids, self.waiting_records, strict=True)
