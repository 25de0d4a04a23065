"""User-facing request and response bodies of the REST API (also the CLI's --json output)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class JobSubmit(BaseModel):
    """A submission as a user states it, in Slurm's terms. The controller normalizes and validates it
    against the cluster (partitions, node sizes) and answers 422 with a specific message if it can
    never run."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    script: str | None = Field(None, description="Script text; runs as every task. Exclusive with argv.")
    argv: list[str] | None = Field(None, description="Command to run as every task. Exclusive with script.")
    script_args: list[str] = Field([], description="Arguments given to the script")
    workdir: str
    env: dict[str, str] = {}
    user: str
    uid: int = 0
    submit_host: str = ""
    partition: str | None = None
    nodes: int | None = Field(None, ge=1)
    ntasks: int | None = Field(None, ge=1)
    ntasks_per_node: int | None = Field(None, ge=1)
    gpus: int | None = Field(None, ge=0, description="GPUs for the whole job")
    gpus_per_node: int | None = Field(None, ge=0)
    gpus_per_task: int | None = Field(None, ge=0)
    cpus_per_task: int = Field(1, ge=1)
    mem_mib: int | None = Field(None, ge=0, description="Memory per node")
    mem_per_gpu_mib: int | None = Field(None, ge=0)
    mem_per_cpu_mib: int | None = Field(None, ge=0)
    time_limit_s: int | None = Field(None, ge=1)
    output: str | None = None
    error: str | None = None
    priority: int = 0


class SubmitReply(BaseModel):
    job_id: int


class SliceOut(BaseModel):
    node: str
    gpus: list[int]
    cpus: int
    mem_mib: int


class JobOut(BaseModel):
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
    exit_code: int
    exit_signal: int
    gpu_seconds: float
    workdir: str
    output: str
    error: str | None
    restart_count: int


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


class PartitionOut(BaseModel):
    name: str
    default: bool
    up: bool
    max_time_s: int | None
    default_time_s: int
    nodes: list[str]


class NodeUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    drain: bool
    reason: str = ""


class ErrorOut(BaseModel):
    detail: str
