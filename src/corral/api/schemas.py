"""User-facing request and response bodies of the REST API (also the CLI's --json output)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from corral.api.containers import ContainerFields
from corral.api.fields import (
    Amount,
    Args,
    Comment,
    Count,
    Env,
    EpochS,
    FilePath,
    MemMib,
    Name,
    Priority,
    Script,
    TimeLimitS,
    Uid,
    WorkDir,
)


class JobSubmit(ContainerFields):
    """A submission as a user states it, in Slurm's terms. The controller normalizes and validates it
    against the cluster (partitions, node sizes) and answers 422 with a specific message if it can
    never run."""

    model_config = ConfigDict(extra="forbid")

    name: Name | None = None
    script: Script | None = Field(None, description="Script text; runs as every task. Exclusive with argv.")
    argv: Args | None = Field(None, description="Command to run as every task. Exclusive with script.")
    script_args: Args = Field([], description="Arguments given to the script")
    workdir: WorkDir
    env: Env = {}
    user: Name
    uid: Uid = 0
    submit_host: Name = ""
    partition: Name | None = None
    nodes: Count | None = None
    ntasks: Count | None = None
    ntasks_per_node: Count | None = None
    gpus: Amount | None = Field(None, description="GPUs for the whole job")
    gpus_per_node: Amount | None = None
    gpus_per_task: Amount | None = None
    gpu_model: Name | None = Field(None, description="Run only on nodes with this GPU model: its Slurm type ('h100'), "
                                                     "NVML's or Slurm's AutoDetect name, any case ('A|B': either)")
    gpu_milli: int | None = Field(None, ge=1, le=1000, description=(
        "A share of one GPU per node in milli-GPU (1..999; 1000 = whole GPUs, the default); needs exactly "
        "one GPU per node. The scheduler packs shares onto devices; tasks on a share get the CUDA MPS "
        "variables that bound it (enforced where the node runs the MPS control daemon)."))
    gpu_share: str | None = Field(None, pattern=r"^(shard|mps):[0-9]{1,6}$", description=(
        "A share of one GPU per node in Slurm's terms: 'shard:N' (N of the GPU's shards, the cluster's "
        "shards_per_gpu, default 8) or 'mps:P' (P percent); sets gpu_milli, which must then be left out"))
    cpus_per_task: Count | None = Field(None, description="Default 1")
    mem_mib: MemMib | None = Field(None, description="Memory per node")
    mem_per_gpu_mib: MemMib | None = None
    mem_per_cpu_mib: MemMib | None = None
    time_limit_s: TimeLimitS | None = None
    output: FilePath | None = None
    error: FilePath | None = None
    priority: Priority = 0
    account: Name | None = None  # default: the user's default account
    qos: Name | None = None  # default: the cluster's default QOS
    queue: Name | None = None  # quota queue; default: the queue of the job's account
    array: Comment | None = Field(None, description="Slurm array spec: 0-99%8, 1,3,5, 0-15:4")
    dependency: Comment | None = Field(
        None, description="afterok:1:2,afterany:3 (all) or afterok:1?afterok:2 (any); singleton")
    signal: Name | None = Field(None, description="[B:]SIG[@seconds]: warning signal before the time limit")
    requeue: bool = True  # may be requeued (preemption in requeue mode, scontrol requeue, node failure)
    expedited_requeue: bool = Field(False, description=(
        "sbatch --requeue=expedite (Slurm 25.11): requeued after a node failure, the job goes first and the "
        "healthy nodes it ran on are held for it until it starts again (at most the cluster's expedite_hold_s)"))
    reservation: Name | None = None
    nodelist: Comment | None = Field(None, description="sbatch -w: run on exactly these nodes (a hostlist)")
    exclude: Comment | None = Field(None, description="sbatch -x: never on these nodes (a hostlist)")
    constraint: Comment | None = Field(None, description="sbatch --constraint: node features, 'a', 'a&b' (all) or "
                                                         "'a|b' (any)")
    exclusive: bool = Field(False, description="sbatch --exclusive: whole nodes, nothing else placed beside the job")
    hold: bool = False
    batch: bool = Field(False, description="sbatch semantics: the script runs once, on the first node")
    begin_time: EpochS | None = Field(None, description="Not eligible to start before this time (epoch seconds, "
                                     "sbatch --begin)")
    allocation: bool = Field(False, description="salloc semantics: no script or command; the caller starts "
                             "steps in the allocation and ends it with POST /jobs/{id}/complete")
    comment: Comment = ""
    wckey: Name = ""
    acctg_freq_s: int | None = Field(None, ge=0, le=86400, description=(
        "Sample the job's CPU, memory and GPU usage this often (sbatch --acctg-freq=task=N); 0: never; "
        "None: the agent's interval"))
    open_mode: Literal["append", "truncate"] | None = Field(
        None, description="Output files: batch jobs truncate by default, as sbatch does")


class SubmitReply(BaseModel):
    job_id: int  # for an array: the array job id (its first task's id)
    task_ids: list[int] = []  # for an array: every task's own job id


class SliceOut(BaseModel):
    node: str
    gpus: list[int]
    cpus: int
    mem_mib: int
    gpu_milli: int = 1000  # < 1000: a share of the one GPU listed


class JobOut(BaseModel):
    """A job. `priority` is the multifactor priority the scheduler orders pending jobs by (for other
    jobs, the adjustment given at submission)."""

    id: int
    name: str
    user: str
    state: str
    reason: str
    partition: str
    priority: int
    submit_time: float
    start_time: float | None
    end_time: float | None
    estimated_start: float | None
    # Where estimated_start comes from: "forecast" (the engine run forward with predicted runtimes) or
    # "reservation" (the backfill reservation the scheduler holds for the job, from time limits).
    estimated_start_source: Literal["forecast", "reservation"] | None = None
    # [earliest, latest] start around a forecast (sim/forecast.py OnlineWindow, calibrated online to hold the
    # actual start for 80 % of jobs); None when estimated_start is not a forecast.
    estimated_start_window: list[float] | None = None
    time_limit_s: int
    elapsed_s: float
    num_nodes: int
    tasks_per_node: int
    num_tasks: int
    gpus_per_node: int
    cpus_per_task: int
    mem_per_node_mib: int
    total_gpus: int
    nodelist: str  # Slurm hostlist of the allocation, "" while pending
    slices: list[SliceOut]
    gpu_share: str = ""  # a share of one GPU per node as asked for: "shard:2", "mps:50"
    exit_code: int
    exit_signal: int
    gpu_seconds: float
    workdir: str
    output: str
    error: str | None
    restart_count: int
    account: str = ""
    qos: str = ""
    queue: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_throttle: int | None = None
    dependency: str = ""
    reason_detail: str = ""
    position: int | None = None  # 1-based place in the scheduling order among pending jobs
    held: bool = False
    requeue: bool = True
    expedited_requeue: bool = False
    reservation: str = ""
    uid: int = 0
    submit_host: str = ""
    # What happened to the job: preemptions (by whom, why), requeues, warning signals.
    history: list[dict] = []
    # The nodes it chose (sbatch -w, -x, --constraint) and --exclusive; `nodelist` is where it runs.
    req_nodelist: str = ""
    exc_nodelist: str = ""
    constraint: str = ""
    exclusive: bool = False
    # Its container (sbatch/srun/salloc --container-*; "" image: none).
    container_image: str = ""
    container_mounts: str = ""
    container_workdir: str = ""
    container_name: str = ""
    container_env: str = ""
    container_mount_home: bool = True
    container_remap_root: bool = False
    comment: str = ""
    wckey: str = ""
    open_mode: str = "append"
    batch: bool = False
    # salloc, or srun outside a job (`corral run`): the job runs nothing itself and has no output file;
    # its steps' output went to the srun that started them.
    allocation: bool = False
    cancelled_by_uid: int | None = None
    # Job steps (issue 4's srun); a batch job shows its batch step here.
    steps: list[dict] = []
    # What the job's own tasks (the batch shell, or every task of a job without steps) used, as the agents
    # sampled it (cpu_s, max_rss_kib, ave_rss_kib, gpus, max_gpu_util_pct, ...); each step row has its own.
    # None: not sampled (not started, or ended before its first sample).
    usage: dict | None = None
    # The job's GPUs have stayed idle (under 5 %, every node) for the controller's gpu_idle_flag_s or longer,
    # as its latest samples (or, once it ended, its last ones) say.
    gpu_idle_flagged: bool = False
    # Lists asked with combine_arrays: a record standing for an array's pending tasks ("5-9%2"), as
    # squeue and sacct show them; its id is the array's id.
    array_task_spec: str | None = None


class GpuOut(BaseModel):
    index: int
    model: str
    memory_mib: int
    domain: str | None
    allocated_to: int | None


class NodeOut(BaseModel):
    name: str
    state: str  # idle, mixed, allocated, draining, drained, down
    address: str
    partitions: list[str]
    cpus: int
    cpus_alloc: int
    mem_mib: int
    mem_alloc_mib: int
    gpus: list[GpuOut]
    gpus_alloc: int
    drain_reason: str
    last_seen: float
    run_as_user: bool = True  # False: development mode, every task runs as agent_user
    agent_user: str = ""
    cgroups: str = ""  # how jobs are isolated: "cgroup v2 at ...", or why they are not
    features: list[str] = []  # its agent's --feature list and the discovered ones (the GPU model's type)


class PartitionOut(BaseModel):
    name: str
    default: bool
    up: bool
    max_time_s: int | None
    default_time_s: int
    nodes: list[str]
    priority_job_factor: int = 1


class SchedulerOut(BaseModel):
    """The controller's [scheduler] settings (what `corral advise` replays its history under)."""

    placement: str
    backfill: bool
    max_reservations: int
    max_jobs_considered: int | None
    fgd_cpu_weight: float
    # fgd's typical tasks: gpus, gpu_milli, cpus, gpu_model and weight each, as the configuration writes them.
    task_mix: list[dict]


class JobUpdate(BaseModel):
    """scontrol update: what may change in an active job (priority only while it waits)."""

    model_config = ConfigDict(extra="forbid")
    name: Name | None = Field(None, min_length=1)
    comment: Comment | None = None
    time_limit_s: TimeLimitS | None = None
    priority: Priority | None = None


class NodeUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    drain: bool
    reason: Comment = ""


class ErrorOut(BaseModel):
    detail: str


class StoppedJob(BaseModel):
    id: int
    state: str


class ClusterStopOut(BaseModel):
    """What stopping the cluster did to its jobs (`POST /cluster/stop`, which `corral up` sends first)."""

    requeued: list[int]  # pending again, same id: they run again when the cluster starts again
    ended: list[StoppedJob]  # their final state (NODE_FAIL: they may not be requeued)
    unconfirmed: list[int]  # still being stopped when the wait ran out (their tasks were not reported gone)
    pending: int  # jobs that were waiting, and wait on
