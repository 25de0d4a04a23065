"""Messages between the controller and node agents (JSON over HTTP, bearer-token authenticated).

Flow: the agent POSTs `Registration` to /api/v1/agents/register and receives `RegistrationReply`
(with the controller's epoch). It then long-polls GET /api/v1/agents/{node}/commands?after=SEQ&wait_s=W
with header `X-Corral-Epoch: <epoch>`; the reply is `CommandBatch`. Passing `after=SEQ` acknowledges every
command up to SEQ. The agent POSTs `EventBatch` to /api/v1/agents/{node}/events as things happen, retrying
until the controller accepts them (events are idempotent on the controller side). Any 409 reply means the
controller restarted: register again (reporting what runs) and carry on.

Controllers sharing a database take turns leading; every registration reply and command batch carries the
leader's lease epoch (`leader_epoch`), which grows at every takeover. An agent remembers the highest it has
seen and refuses replies and commands with a lower one: they come from a controller that lost the lease
(paused or cut off) and does not know it yet. A standby answers 421 with the leader's URL in
`X-Corral-Leader` (and `leader` in the body) when it knows it.
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import AfterValidator, BaseModel, Field

from corral import limits
from corral.api.fields import Amount, Diagnostic, ExitCode, Index, JobId, MemMib, Name, Pid, Signal, StepId
from corral.hostlist import check_node_name

API_PREFIX = "/api/v1"
EPOCH_HEADER = "X-Corral-Epoch"
# A standby's 421 names the leader here (absent while no controller is known to lead).
LEADER_HEADER = "X-Corral-Leader"
# The variable that carries a job's own credential to its tasks (corral.slurm.common.target reads it).
JOB_CREDENTIAL_ENV = "CORRAL_TOKEN"
# A cluster's id on a host (`corral up` makes one): its agents carry it in the names of what they make there
# (cgroups, spools), so that several clusters on one host, their nodes named alike, never touch each other's.
CLUSTER_ID = re.compile(r"[a-z0-9]{1,32}")


def check_cluster_id(text: str) -> str:
    """`text` if it can be a cluster id (1 to 32 lower-case letters and digits), else ValueError."""
    if not CLUSTER_ID.fullmatch(text):
        raise ValueError(f"cluster id {text!r} is not 1 to 32 lower-case letters and digits")
    return text


# What agents send is bounded like every other input (corral.limits): a registration with a value
# the store cannot hold is refused whole, before the engine sees it.
class GpuInfo(BaseModel):
    index: Index
    model: Name = "sim-gpu"
    memory_mib: MemMib = 0
    domain: Name | None = None
    uuid: Name | None = None


class Registration(BaseModel):
    node: Annotated[str, AfterValidator(check_node_name)]
    address: Name
    gpus: list[GpuInfo] = Field(max_length=limits.LIST_MAX_ITEMS)
    cpus: Amount
    mem_mib: MemMib
    # Jobs whose tasks run on this node now (the agent started or adopted them, and they have not all exited).
    running_jobs: list[JobId] = Field([], max_length=limits.LIST_MAX_ITEMS)
    # Jobs whose local tasks ended but whose NodeFinished event the controller has not acknowledged
    # yet; the agent re-sends those events right after registering.
    finished_jobs: list[JobId] = Field([], max_length=limits.LIST_MAX_ITEMS)
    # Steps whose tasks run on this node now, as [job id, step id] pairs.
    running_steps: list[tuple[JobId, StepId]] = Field([], max_length=limits.LIST_MAX_ITEMS)
    agent_version: Name = ""
    # False: the agent cannot switch users (it does not run as root), every task runs as `agent_user`.
    run_as_user: bool = False
    agent_user: Name = ""
    # How tasks are isolated: "cgroup v2 at /sys/fs/cgroup/corral", or why they are not.
    cgroups: Diagnostic = ""
    # Its --feature list (what sbatch --constraint matches, with the features the controller discovers).
    features: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:+-]{1,64}$")]] = Field(
        [], max_length=limits.LIST_MAX_ITEMS)


class RegistrationReply(BaseModel):
    epoch: str  # this controller's session: any change means "register again"
    heartbeat_s: float
    leader_epoch: int = 0  # the lease epoch of the controller that answers (0: a controller without a lease)
    # Jobs this agent reported running that the controller wants gone (cancelled or unknown).
    kill_jobs: list[int] = []
    # Self-fencing (decision 0017): once the agent has had no successful exchange with a leader for this long
    # (measured from the send time of its last request that got a reply), its task leaders SIGKILL the node's
    # tasks; the controller declares the node down only later (node_timeout_s). None: never (no node timeout).
    fence_after_s: float | None = None


class TaskLaunch(BaseModel):
    rank: int  # global rank (SLURM_PROCID)
    local_rank: int  # SLURM_LOCALID
    gpus: list[int]  # node-local device indices -> CUDA_VISIBLE_DEVICES


class GpuShareLaunch(BaseModel):
    """A share of one device (--gres=shard:N, mps:P): what bounds its tasks under CUDA MPS."""

    gpu_milli: int  # 1..999
    device_memory_mib: int = 0  # the whole device's, as the agent reported it (0: unknown)
    shards: int = 0  # --gres=shard:N: N (SLURM_SHARDS_ON_NODE); 0 for mps


# A service replica's named ports and probes (issue 22; agent/ports.py, agent/probes.py). The controller
# builds them from a validated service spec; the agent still refuses a launch whose probe names a port the
# launch does not have, naming both, rather than trusting the sender.
PortName = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[A-Za-z][A-Za-z0-9_]*$")]
PortNumber = Annotated[int, Field(ge=0, le=65535)]  # 0: any free port on the node


class PortRequest(BaseModel):
    """A port a replica needs on its node: `port` 0 lets the agent pick a free one; a fixed port that is
    taken fails the launch, naming it."""

    name: PortName
    port: PortNumber = 0


class HttpCheckSpec(BaseModel):
    path: Annotated[str, Field(min_length=1, max_length=2048, pattern=r"^/")] = "/"
    port: PortName  # a name from the launch's `ports`


class TcpCheckSpec(BaseModel):
    port: PortName


class ExecCheckSpec(BaseModel):
    command: list[Name] = Field(min_length=1, max_length=limits.LIST_MAX_ITEMS)


class ProbeSpec(BaseModel):
    """One probe (Kubernetes' semantics): after `initial_delay_s`, a check every `period_s`, each given
    `timeout_s`; `success_threshold` successes in a row make it pass, `failure_threshold` failures in a row
    make it fail. Exactly one of `http`, `tcp`, `exec`."""

    http: HttpCheckSpec | None = None
    tcp: TcpCheckSpec | None = None
    exec: ExecCheckSpec | None = None
    initial_delay_s: Annotated[float, Field(ge=0, le=86400)] = 0.0
    period_s: Annotated[float, Field(gt=0, le=86400)] = 10.0
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 1.0
    success_threshold: Annotated[int, Field(ge=1, le=1000)] = 1
    failure_threshold: Annotated[int, Field(ge=1, le=1000)] = 3


class ProbesSpec(BaseModel):
    """A replica's probes: `startup` first (readiness and liveness wait until it passes; failing it is a
    liveness failure), `readiness` (gates traffic), `liveness` (failing it restarts the replica)."""

    startup: ProbeSpec | None = None
    readiness: ProbeSpec | None = None
    liveness: ProbeSpec | None = None


class ContainerLaunch(BaseModel):
    """The container a launch's tasks run in (pyxis's flags, corral.container_options; decision 0020)."""

    # "" with a name: the job's container of that name on the node (a later step's `--container-name` alone)
    image: str = Field("", max_length=limits.PATH_MAX_CHARS)
    mounts: str = ""  # SRC[:DST[:ro|rw]][,...]
    workdir: str = ""
    name: str = ""  # a named container: the job's later steps on the node reuse it
    env: str = ""  # NAME[,NAME...]: the job's variables that override the image's
    mount_home: bool = True
    remap_root: bool = False

    @classmethod
    def of(cls, fields: Any) -> ContainerLaunch | None:
        """From a job spec's or a step's container_* fields (an object or a mapping); None without an image
        or a name."""
        get = fields.get if isinstance(fields, dict) else lambda name, default=None: getattr(fields, name, default)
        image = get("container_image") or ""
        if not image and not get("container_name"):
            return None
        return cls(image=image, mounts=get("container_mounts") or "", workdir=get("container_workdir") or "",
                   name=get("container_name") or "", env=get("container_env") or "",
                   mount_home=get("container_mount_home", True) is not False,
                   remap_root=bool(get("container_remap_root", False)))


class LaunchJob(BaseModel):
    kind: Literal["launch"] = "launch"
    seq: int = 0
    job_id: int
    job_name: str
    user: str
    uid: int = 0
    partition: str
    node_index: int  # SLURM_NODEID
    nodes: list[str]  # every node of the allocation, in rank order
    master_addr: str
    master_port: int
    tasks_per_node: int
    num_tasks: int
    cpus_per_task: int
    cpus_on_node: int
    mem_per_node_mib: int
    node_gpus: list[int]  # every device the job holds on this node
    gpus_per_task: int | None = None
    share: GpuShareLaunch | None = None  # the job holds a share of its one device, not the device
    tasks: list[TaskLaunch]
    script: str | None = None
    argv: list[str] = []
    workdir: str
    env: dict[str, str] = {}
    output: str
    error: str | None = None
    time_limit_s: int
    restart_count: int = 0
    submit_host: str = ""
    cluster_name: str = "corral"
    # sbatch's batch step: one task on the first node, with the batch environment (no ranks).
    batch: bool = False
    # Which of ntasks, ntasks_per_node, cpus_per_task, gpus_per_node the user gave: Slurm exports them only then.
    explicit: list[str] = []
    open_mode: str = "append"  # "truncate": a batch job's output files start empty
    acctg_freq_s: float | None = None  # --acctg-freq: sample its usage this often (None: the agent's interval)
    # A service replica's ports (each task gets CORRAL_PORT_<NAME> and PORT, the first; NodeStarted.ports
    # reports them) and probes (run by the agent of the replica's first node). Empty / None for batch work.
    ports: list[PortRequest] = Field([], max_length=limits.LIST_MAX_ITEMS)
    probes: ProbesSpec | None = None
    # The container its tasks run in (None: on the node). A batch script runs on the node: None here, and its
    # steps get the job's container.
    container: ContainerLaunch | None = None


class LaunchStep(BaseModel):
    """Start this node's tasks of a job step (srun inside an allocation).

    The tasks' stdout/stderr are streamed to srun's listener at `io_host:io_port` (see corral.stepio),
    unless `output`/`error` name files; srun's stdin comes back the same way. The environment is the
    agent's (scrubbed), then `env` (what srun exported, with its step-wide Slurm variables), then the
    job, step and task variables the agent computes."""

    kind: Literal["step"] = "step"
    seq: int = 0
    job_id: int
    step_id: int
    step_name: str
    job_name: str
    user: str
    uid: int = 0
    partition: str
    cluster_name: str = "corral"
    submit_host: str = ""
    job_nodes: list[str]  # the allocation: SLURM_JOB_NODELIST, SLURM_JOB_NUM_NODES
    cpus_on_node: int  # the job's CPUs on this node
    # The job's memory on each node: the limit of its cgroup where a step is the first of it on a node.
    mem_per_node_mib: int = 0
    node_gpus: list[int]  # every device the job holds on this node
    time_limit_s: int
    restart_count: int = 0
    step_nodes: list[str]  # the step's nodes, in rank order: SLURM_STEP_NODELIST, SLURM_NODELIST
    node_index: int  # this node's place in step_nodes: SLURM_NODEID
    tasks_per_node: list[int]  # per step node: SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE
    num_tasks: int
    cpus_per_task: int = 1
    gpus_per_task: int | None = None
    share: GpuShareLaunch | None = None  # the job holds a share of its one device, not the device
    tasks: list[TaskLaunch]  # this node's tasks
    argv: list[str]
    workdir: str
    env: dict[str, str] = {}
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    # Slurm filename patterns (%j %s %t %N %n %A %a ...); None: the stream goes to srun.
    output: str | None = None
    error: str | None = None
    # srun's --input: "all" (the default: srun's stdin to every task), "none", or a rank as text.
    input: str = "all"
    io_host: str | None = None
    io_port: int | None = None
    io_token: str = ""
    # srun --pty: task 0's stdin, stdout and stderr are a pseudo-terminal (its controlling terminal) of this
    # window size, relayed to srun as its stdout; the other tasks' streams are /dev/null.
    pty: bool = False
    pty_rows: int = 24
    pty_cols: int = 80
    acctg_freq_s: float | None = None  # --acctg-freq (None: the job's, else the agent's interval)
    # The container its tasks run in: the step's own (srun --container-image), else its job's; None: none.
    container: ContainerLaunch | None = None


class SignalJob(BaseModel):
    """Signal a job's tasks on this node: `signal` to each task's process group, then SIGKILL to those
    still alive after `grace_s`. A negative `grace_s` sends the signal only (scancel --signal).

    `target`: "all" (batch shell, job tasks and steps), "steps" (only step tasks), "batch" (only the
    batch shell / the job's own tasks). `step_id` narrows "steps" to one step. `reason`: why (see
    corral.kill_reasons); the agent writes slurmstepd's closing line for it into the job's or step's
    stderr (None: no line)."""

    kind: Literal["kill"] = "kill"
    seq: int = 0
    job_id: int
    signal: int = 15
    grace_s: float = 10.0
    target: Literal["all", "steps", "batch"] = "all"
    step_id: int | None = None
    reason: Literal["cancelled", "time-limit", "preemption", "node-failure", "requeue", "failure"] | None = None
    # A ready service replica: signal it this much later, once the gateway has stopped routing to it.
    drain_s: Annotated[float, Field(ge=0, le=60)] = 0.0
    # Written after the closing line, prefixed "corral: " (why a policy stopped the job: a session's idle stop).
    note: Annotated[str, Field(max_length=500)] | None = None


class AttachStep(BaseModel):
    """sattach: connect to another listener (`io_host:io_port`, token `io_token`) for a running step's I/O,
    as to srun's (corral.stepio): its tasks' output and exits go there too from now on, and its stdin,
    signal and window frames are obeyed; its end detaches it and kills nothing."""

    kind: Literal["attach"] = "attach"
    seq: int = 0
    job_id: int
    step_id: int
    io_host: str
    io_port: int
    io_token: str


Command = Annotated[Union[LaunchJob, LaunchStep, SignalJob, AttachStep], Field(discriminator="kind")]


class CommandBatch(BaseModel):
    commands: list[Command]
    leader_epoch: int = 0


class Usage(BaseModel):
    """What an agent sampled of one job's (or step's) tasks on its node (agent/usage.py): the memory and
    CPU of their cgroup (or of their process groups, through psutil), and the utilisation and memory of the
    GPUs they hold (NVML). Aggregates over the samples: no time series leaves the node."""

    samples: Annotated[int, Field(ge=0)] = 0
    interval_s: Annotated[float, Field(ge=0)] = 0.0
    rss_kib: Annotated[int, Field(ge=0)] = 0  # the last sample
    max_rss_kib: Annotated[int, Field(ge=0)] = 0
    ave_rss_kib: Annotated[int, Field(ge=0)] = 0
    cpu_s: Annotated[float, Field(ge=0)] = 0.0  # user + system CPU time so far
    gpus: Annotated[int, Field(ge=0)] = 0  # how many devices were sampled (0: none, or no NVML)
    gpu_util_pct: Annotated[float, Field(ge=0, le=100)] = 0.0  # the last sample, mean over the devices
    max_gpu_util_pct: Annotated[float, Field(ge=0, le=100)] = 0.0
    ave_gpu_util_pct: Annotated[float, Field(ge=0, le=100)] = 0.0
    max_gpu_mem_mib: Annotated[int, Field(ge=0)] = 0  # summed over the devices
    ave_gpu_mem_mib: Annotated[int, Field(ge=0)] = 0
    # Seconds since the GPUs' utilisation last reached the idleness threshold (0 with no GPUs).
    gpu_idle_s: Annotated[float, Field(ge=0)] = 0.0


class UsageReport(BaseModel):
    """The latest usage of a running job (step_id None) or step on this node, sent every sampling interval
    (at most one waits in the agent's outbox)."""

    kind: Literal["usage"] = "usage"
    job_id: JobId
    step_id: StepId | None = None
    usage: Usage


class NodeStarted(BaseModel):
    kind: Literal["started"] = "started"
    job_id: JobId
    pids: list[Pid] = Field([], max_length=limits.LIST_MAX_ITEMS)
    # The launch's restart count: which run of the job this is (None: an older agent that does not say).
    restart_count: Amount | None = None
    # The ports the agent gave the replica's tasks on this node, by name (empty for batch work).
    ports: dict[PortName, Annotated[int, Field(ge=1, le=65535)]] = Field({}, max_length=limits.LIST_MAX_ITEMS)


class TaskExit(BaseModel):
    rank: Index
    exit_code: ExitCode  # 0..255 for a task that exited; 0 for one killed by a signal (Slurm's "0:9")
    signal: Signal = 0  # the signal that ended the task, 0 if it exited


# corral's own machinery failed under a task (never the task's own exit, nor the user's doing): its leader
# died without recording the task's exit ("leader-killed"), the task's cgroup was removed while it ran
# ("cgroup-removed"), the agent's runner failed and lost track of the tasks ("agent-error"), or the agent
# could not start them for a reason of its own: its spool, its cgroups, its leader factory ("start-failed";
# the controller drains the node as well, as Slurm does after a launch failure of slurmd's own).
InfrastructureKind = Literal["leader-killed", "cgroup-removed", "agent-error", "start-failed"]
INFRASTRUCTURE_KINDS: tuple[str, ...] = get_args(InfrastructureKind)


class InfrastructureFailure(BaseModel):
    """Why a node's part of a job ended through no doing of its tasks: the controller requeues the job as
    after a node failure (or ends it NODE_FAIL), with `reason` in its history and Reason."""

    kind: InfrastructureKind
    reason: Annotated[Diagnostic, Field(min_length=1)]


class NodeFinished(BaseModel):
    """Every local task of the job has exited (or could not start: then `error` says why)."""

    kind: Literal["finished"] = "finished"
    job_id: JobId
    tasks: list[TaskExit] = Field(max_length=limits.LIST_MAX_ITEMS)
    error: Diagnostic | None = None
    # The kernel killed a process of the job for going over its memory limit (Slurm's OUT_OF_MEMORY).
    oom_killed: bool = False
    usage: Usage | None = None  # what was sampled over the tasks' life (None: never sampled)
    # The node's task leaders killed the tasks because the agent lost contact with the controller (decision
    # 0017): why, e.g. "lost contact with the controller for 20 s". The controller treats it as a node failure.
    fenced: Diagnostic | None = None
    # The tasks ended because corral's own machinery failed here (their `tasks` exits are not their own).
    infrastructure: InfrastructureFailure | None = None
    # The launch's restart count: a late report of an earlier run of the job is ignored (None: not said).
    restart_count: Amount | None = None


class StepFinished(BaseModel):
    """Every local task of a step has exited (or could not start: then `error` says why)."""

    kind: Literal["step-finished"] = "step-finished"
    job_id: JobId
    step_id: StepId
    tasks: list[TaskExit] = Field(max_length=limits.LIST_MAX_ITEMS)
    error: Diagnostic | None = None
    oom_killed: bool = False
    usage: Usage | None = None
    # The step's tasks here ended because corral's own machinery failed (the step ends NODE_FAIL).
    infrastructure: InfrastructureFailure | None = None


class NodeUnhealthy(BaseModel):
    """The agent's health checks failed (agent/health.py: a fatal XID, ECC errors, retired pages, NVLink
    errors, the operator's health-check program): the controller drains the node with `reason` and stops
    the jobs running there as for a failed node."""

    kind: Literal["unhealthy"] = "unhealthy"
    reason: Annotated[Diagnostic, Field(min_length=1)]


ProbeName = Literal["startup", "readiness", "liveness"]


class ProbeStatus(BaseModel):
    """A probe's state after it flipped: `ok` after `consecutive` successes in a row, failed after
    `consecutive` failures in a row; `detail` is the last check's ("HTTP 500", "connection refused",
    "exit 3: disk full", "timed out after 1 s"). The engine can write "liveness probe failed 3 times: HTTP 500"
    from `probe`, `consecutive` and `detail`."""

    probe: ProbeName
    ok: bool
    consecutive: Annotated[int, Field(ge=1, le=limits.COUNT_MAX)]
    detail: Diagnostic = ""
    # The replica must be restarted: its liveness probe failed, or its startup probe did (as in Kubernetes).
    restart: bool = False


class ProbesReported(BaseModel):
    """A replica's probes changed state on its first node (sent only when a probe flips). `ready`: whether it
    may get traffic now (readiness passed; with no readiness probe, once startup passed)."""

    kind: Literal["probes"] = "probes"
    job_id: JobId
    restart_count: Amount | None = None  # which run of the job: a late report of an earlier run is stale
    ready: bool
    results: list[ProbeStatus] = Field(min_length=1, max_length=3)


Event = Annotated[Union[NodeStarted, NodeFinished, StepFinished, NodeUnhealthy, UsageReport, ProbesReported],
                  Field(discriminator="kind")]


class EventBatch(BaseModel):
    events: list[Event] = Field(max_length=limits.LIST_MAX_ITEMS)


# An agent's auth socket asks for a credential for the local user it found with SO_PEERCRED:
# POST /api/v1/agents/{node}/user-credentials (docs/security.md).
class UserCredentialRequest(BaseModel):
    # The credential's fields are separated by ":": a name with one (or a space) could not be read back.
    user: Annotated[Name, Field(min_length=1, pattern=r"^[^:\s]+$")]
    uid: Annotated[int, Field(ge=0, lt=2**32)]
    gid: Annotated[int, Field(ge=0, lt=2**32)]


class UserCredentialReply(BaseModel):
    credential: str


# A new machine's agent exchanges a one-time join token (the bearer) for its node's agent credential:
# POST /api/v1/agents/join (docs/adding-a-machine.md).
class JoinRequest(BaseModel):
    node: Annotated[str, AfterValidator(check_node_name)]


class JoinReply(BaseModel):
    node: str
    credential: str  # the node's agent credential (for the agent's --secret-file)
