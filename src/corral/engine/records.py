"""Mutable records the engine folds events into, and the store persists."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from corral.core.model import Gpu, NodeSlice, Request


class JobState(str, Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
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


@dataclass(slots=True)
class NodeRun:
    """One node's part of a running job, as the agent reported it."""

    started: bool = False
    finished: bool = False
    exit_code: int = 0
    signal: int = 0


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

    @property
    def gpu_count(self) -> int:
        return sum(len(s.gpus) for s in self.slices)

    @property
    def gpu_seconds(self) -> float:
        if self.start_time is None:
            return 0.0
        end = self.end_time if self.end_time is not None else self.start_time
        return self.gpu_count * max(0.0, end - self.start_time)

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
