"""Mutable records the engine folds events into, and the store persists."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from corral.api.services import ServiceSpec
from corral.core.model import Gpu, NodeSlice, Request

# The stop causes (Job.stop_cause) are history events' names, defined with the records in history.py and
# still importable from here.
from corral.engine.history import CLUSTER_STOPPED as CLUSTER_STOPPED
from corral.engine.history import NODE_FAILED as NODE_FAILED
from corral.engine.history import PREEMPTED as PREEMPTED
from corral.engine.history import REQUEUE_REQUESTED as REQUEUE_REQUESTED
from corral.engine.history import HistoryEntry
from corral.engine.kinds import JobKind, kind_from_flags


class JobState(str, Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"

    @property
    def terminal(self) -> bool:
        return self not in (JobState.PENDING, JobState.RUNNING, JobState.COMPLETING)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What the user submitted. Never changes after submission."""

    name: str
    user: str
    request: Request
    # Either a script (its text; the agent writes it out and executes it, with argv as its arguments)
    # or an argv.
    script: str | None = None
    argv: tuple[str, ...] = ()
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    # Slurm filename patterns (%j %t %x %u %N %A %a %%), relative to workdir unless absolute.
    output: str = "slurm-%j.out"
    error: str | None = None  # None: stderr goes with stdout
    # When set, each task gets its own GPUs (node GPUs split between tasks); else every task on a
    # node sees all the node's GPUs, as Slurm does.
    gpus_per_task: int | None = None
    priority: int = 0
    uid: int = 0
    submit_host: str = ""
    account: str = ""
    qos: str = ""
    queue: str = ""  # quota queue ("" = none)
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_throttle: int | None = None  # at most this many tasks of the array run at once
    # Every task index of the array, compressed ("0-99"): task i of the sorted indices has job id
    # array_job_id + i.
    array_indices: str = ""
    dependency: str = ""
    warn_signal: int = 0  # sent warn_before_s before the time limit (0: none)
    warn_before_s: int = 0
    warn_batch: bool = False  # --signal=B:...: the warning goes to the batch shell only, not the steps
    requeue: bool = True
    reservation: str = ""
    # sbatch semantics: the script runs once, on the first node; steps (srun) use the allocation.
    batch: bool = False
    # Which of ntasks, ntasks_per_node, cpus_per_task, gpus_per_node the user gave (comma-separated):
    # Slurm sets SLURM_NTASKS, SLURM_NTASKS_PER_NODE, SLURM_CPUS_PER_TASK and SLURM_GPUS_PER_NODE only then.
    explicit: str = ""
    # A share of one GPU as Slurm's gres was written ("shard:2", "mps:50"; request.gpu_milli holds the
    # share): shown as gres/shard or gres/mps, and shard jobs get SLURM_SHARDS_ON_NODE.
    gpu_share: str = ""
    comment: str = ""
    wckey: str = ""
    acctg_freq_s: int | None = None  # --acctg-freq's task interval (None: the agent's; 0: no sampling)
    open_mode: str = "append"
    # salloc / srun outside an allocation: the job runs nothing itself; its holder (salloc or srun,
    # wherever it runs) starts steps in it and ends it with a completion call.
    allocation: bool = False
    begin_time: float | None = None  # sbatch --begin: not eligible before this time (epoch seconds)
    # sbatch --requeue=expedite (Slurm 25.11): requeued after a node failure, the job goes first and the
    # healthy nodes it ran on are held for it (Job.expedited, Job.hold_nodes).
    expedited_requeue: bool = False
    # A replica of a service: the service's name, the revision of its spec, the replica's index.
    service: str = ""
    service_revision: int = 0
    replica: int = -1
    # At most this many replicas of its service on one node (the service's placement; 0: no limit).
    max_per_node: int = 0
    # With the placement's spread: the service's replica count, spread over the nodes that can take work when
    # the replica is placed (the core's cycle counts them; 0: no spread).
    spread_replicas: int = 0
    # The nodes it chose (sbatch -w, -x as hostlists, --constraint; engine/node_choice.py), and --exclusive.
    nodelist: str = ""
    exclude: str = ""
    constraint: str = ""
    exclusive: bool = False
    # The replica of a session service (a notebook: engine/kinds.py SESSION): run once, its end ends the service.
    session: bool = False
    # A container for its tasks (pyxis's flags, corral.container_options; decision 0020): a batch job's
    # script runs on the node, its steps in the container; "" image: none.
    container_image: str = ""
    container_mounts: str = ""
    container_workdir: str = ""
    container_name: str = ""
    container_env: str = ""
    container_mount_home: bool = True
    container_remap_root: bool = False

    @property
    def kind(self) -> JobKind:
        """Its row of the behaviour table (engine/kinds.py), derived from the stored fields."""
        return kind_from_flags(self.batch, self.allocation, self.service, self.session)


@dataclass(slots=True)
class NodeRun:
    """One node's part of a running job, as the agent reported it."""

    started: bool = False
    finished: bool = False
    exit_code: int = 0
    signal: int = 0
    oom_killed: bool = False  # the kernel killed one of its processes for going over the job's memory
    # What the agent sampled of its tasks (protocol.Usage's fields), for sacct; the engine never reads it.
    usage: dict[str, Any] | None = None


@dataclass(slots=True)
class Step:
    """One srun inside a job's allocation (Slurm's job step N.<step_id>)."""

    step_id: int
    name: str
    nodes: tuple[str, ...]
    tasks_per_node: tuple[int, ...]
    start_time: float
    # What the agents need to start it (argv, env, workdir, output, error, input, io_host, io_port,
    # io_token, cpus_per_task, gpus_per_task); emptied when the step ends.
    launch: dict[str, Any] = field(default_factory=dict)
    end_time: float | None = None
    state: str = "RUNNING"
    exit_code: int = 0
    signal: int = 0
    error: str = ""
    # corral's own machinery failed under its tasks on a node (the agent said so): it ends NODE_FAIL.
    infrastructure_failed: bool = False
    # Nodes that reported all their tasks ended, with the folded result.
    reported: dict[str, NodeRun] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.end_time is None

    @property
    def num_tasks(self) -> int:
        return sum(self.tasks_per_node)


INFRA_REASON = "InfrastructureFailure"  # the Reason's prefix: "InfrastructureFailure:node3: ..."
START_FAILED = "start-failed"  # the kind of failure whose node is drained: its agent cannot start tasks


@dataclass(frozen=True, slots=True)
class InfrastructureFailure:
    """Why a node's part of a run ended through no doing of its tasks (protocol.InfrastructureFailure):
    `kind` one of protocol.INFRASTRUCTURE_KINDS, `reason` the agent's words."""

    kind: str
    reason: str

    def describe(self, node: str) -> str:
        return f"infrastructure failure on {node}: {self.reason}"


STOP_CAUSES = (PREEMPTED, REQUEUE_REQUESTED, CLUSTER_STOPPED, NODE_FAILED)


@dataclass(slots=True)
class Job:
    id: int
    spec: JobSpec
    submit_time: float
    state: JobState = JobState.PENDING
    reason: str = "None"
    estimated_start: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    slices: tuple[NodeSlice, ...] = ()
    runs: dict[str, NodeRun] = field(default_factory=dict)
    exit_code: int = 0
    exit_signal: int = 0
    # While COMPLETING: the state the job ends in once every task has exited.
    final_state: JobState | None = None
    kill_deadline: float | None = None
    restart_count: int = 0
    held: bool = False
    # GPU-seconds of earlier runs (a requeued job keeps its id and its accounting).
    prior_gpu_seconds: float = 0.0
    # The limiting resource, quota or limit behind `reason`, in words.
    reason_detail: str = ""
    # Events worth explaining later, one typed record each (engine/history.py: Preempted, Requeued, ...).
    history: list[HistoryEntry] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    # Not eligible to start before this time: the backoff of a job preempted more than once.
    eligible_at: float | None = None
    # Facts the engine acts on, kept as fields (history is for people): how often the job was preempted,
    # whether its current run got its warning signal, and why it is being stopped to be requeued
    # (one of STOP_CAUSES).
    preemptions: int = 0
    warned: bool = False
    stop_cause: str = ""
    # Requeued after a node failure with --requeue=expedite: it goes first until it starts, and the healthy
    # nodes it ran on are held for it (no other job starts there) until it starts or hold_until passes.
    expedited: bool = False
    hold_nodes: tuple[str, ...] = ()
    hold_until: float | None = None
    # A service replica's: ready for traffic (its readiness probe passed; none: once started), and the
    # ports its agents chose, per node ({"node1": {"http": 41234}}).
    ready: bool = False
    endpoints: dict[str, dict[str, int]] = field(default_factory=dict)
    # A ready replica being stopped is drained first: the gateway stops routing to it, and it gets its
    # SIGTERM only at this time (engine/service_events.py, DRAIN_S).
    drain_until: float | None = None

    @property
    def draining(self) -> bool:
        return self.drain_until is not None

    @property
    def gpu_count(self) -> int:
        return sum(len(s.gpus) for s in self.slices)

    @property
    def gpu_seconds(self) -> float:
        """Every GPU-second the job has held, over all its runs (until now for a running job: see
        run_gpu_seconds)."""
        return self.prior_gpu_seconds + self.run_gpu_seconds(self.end_time if self.end_time is not None
                                                             else self.start_time)

    @property
    def run_start(self) -> float:
        """start_time of a job that has started (RUNNING, COMPLETING)."""
        assert self.start_time is not None, f"job {self.id} has not started"
        return self.start_time

    def run_gpu_seconds(self, until: float | None) -> float:
        if self.start_time is None or until is None:
            return 0.0
        return self.gpu_count * max(0.0, until - self.start_time)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(s.node for s in self.slices)


@dataclass(slots=True)
class Node:
    name: str
    gpus: tuple[Gpu, ...]
    cpus: int
    mem_mib: int
    address: str = "127.0.0.1"
    up: bool = False
    drain: bool = False
    drain_reason: str = ""
    last_seen: float = 0.0
    partitions: frozenset[str] = frozenset()
    # What its agent said at registration (not stored: every registration says it again).
    run_as_user: bool = True  # False: development mode, every task runs as `agent_user`
    agent_user: str = ""
    cgroups: str = ""  # "cgroup v2 at ...", or why there are none
    # Its agent's --feature list and the discovered ones (its GPU model's type): what --constraint matches.
    features: frozenset[str] = frozenset()


@dataclass(slots=True)
class ReplicaRestarts:
    """One replica index's restarts (CrashLoopBackOff): how many in all, and how many in a row without a
    healthy period between them (the backoff doubles with it)."""

    count: int = 0
    streak: int = 0


@dataclass(slots=True)
class Service:
    """A declared service: its spec, `revision` (+1 per changed spec), how many replicas it wants now
    (the spec's, or what it was scaled to), and per replica index its restarts. Every replica is a Job
    (JobSpec.service = name)."""

    spec: ServiceSpec
    revision: int
    desired_replicas: int
    created: float
    # The revision being replaced while a rolling update runs (0: none), and when the update began.
    previous_revision: int = 0
    previous_spec: ServiceSpec | None = None
    update_started: float | None = None
    deleted: bool = False  # being deleted: its replicas are stopped, then it is forgotten
    restarts: dict[int, ReplicaRestarts] = field(default_factory=dict)
    # Why it has fewer replicas than it wants (a replica could not be admitted), in words; "" when none.
    reason: str = ""
    # Events worth explaining: {"t": time, "event": "applied"|"scaled"|"restarted"|..., ...}.
    history: list[dict[str, Any]] = field(default_factory=list)
    # The gateway's last load report (the autoscaler's input): in-flight requests, requests/s, when.
    load: tuple[float, float, float] | None = None
    last_busy: float = 0.0  # when a load report last counted a request
    # The autoscaler's scale-down window: since when it has wanted fewer replicas than desired_replicas, and
    # the most it wanted in that time (None: it wants no fewer).
    lower_since: tuple[float, int] | None = None
    uid: int = 0  # its user's, for its replicas

    @property
    def name(self) -> str:
        return self.spec.name
