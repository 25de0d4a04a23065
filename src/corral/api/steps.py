"""Bodies of the job step API (srun) and of an allocation's completion (salloc)."""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from corral.api.containers import ContainerFields
from corral.api.fields import Args, Comment, Count, Env, FilePath, Name, Names, Port, WorkDir


class StepSubmit(ContainerFields):
    """Start a step in a running job: what `srun` sends, with its defaults already applied. Its container
    fields override its job's one by one (a step with none runs in its job's container, if any)."""

    _for_step: ClassVar[bool] = True
    # None: not given (the job's); srun sends False for --no-container-mount-home and --no-container-remap-root.
    container_mount_home: bool | None = None  # type: ignore[assignment]
    container_remap_root: bool | None = None  # type: ignore[assignment]

    argv: Args = Field(min_length=1)
    name: Name | None = Field(None, description="Default: the command's file name")
    nodes: Count | None = Field(None, description="Default: all usable nodes (fewer if ntasks is smaller)")
    ntasks: Count | None = Field(None, description="Default: nodes x ntasks_per_node, or one per node")
    ntasks_per_node: Count | None = None
    nodelist: Names = Field([], description="Nodes the step must use (srun -w); all must be in the allocation")
    exclude: Names = Field([], description="Nodes the step must not use (srun -x)")
    constraint: Comment | None = Field(None, description="srun --constraint: only the allocation's nodes with "
                                                         "these features ('a', 'a&b' or 'a|b')")
    cpus_per_task: Count = 1
    gpus_per_task: Count | None = Field(None, description="Split the node's GPUs between tasks")
    workdir: WorkDir
    env: Env = Field({}, description="The tasks' environment as srun exports it")
    output: FilePath | None = Field(None, description="File pattern for stdout; default: streamed to srun")
    error: FilePath | None = Field(None, description="File pattern for stderr; default: with stdout")
    input: str = Field("all", pattern=r"^(all|none|[0-9]{1,10})$", description="srun --input: all, none or a rank")
    io_host: Name | None = Field(None, description="srun's listener for the tasks' I/O (corral.stepio)")
    io_port: Port | None = None
    io_token: Name = ""
    pty: bool = Field(False, description="srun --pty: task 0 runs on a pseudo-terminal; the others get /dev/null")
    pty_rows: int = Field(24, ge=0, le=65535, description="The pseudo-terminal's first window size (0: unknown, "
                          "as a terminal that never had one says)")
    pty_cols: int = Field(80, ge=0, le=65535)


class StepAttach(BaseModel):
    """sattach: where the step's nodes connect for its I/O from now on (corral.stepio, as for srun)."""

    io_host: Name
    io_port: Port
    io_token: Name = Field(min_length=16)


class StepOut(BaseModel):
    job_id: int
    step_id: int
    name: str
    state: str
    nodes: list[str]
    tasks_per_node: list[int]
    num_tasks: int
    start_time: float
    end_time: float | None
    exit_code: int
    exit_signal: int
    error: str = ""
    # Which nodes have reported their tasks' end.
    reported_nodes: list[str] = []


class CompleteBody(BaseModel):
    exit_code: int = Field(0, ge=0, le=255)
    signal: int = Field(0, ge=0, le=64)


StepState = Literal["RUNNING", "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"]
