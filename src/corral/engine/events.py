"""What the engine is told: every stimulus is one of these events, handed to `Engine.handle`.

Events are facts (past tense) or requests (`...Requested`, which the engine may refuse by raising before it
changes anything). Each event's reply (what the caller asked for) is in `Result.replies`, in order.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from corral.api.schemas import JobSubmit
from corral.api.services import ServiceSpec
from corral.api.tenancy import ReservationSpec, TenancySpec
from corral.engine.membership import Inventory
from corral.engine.records import InfrastructureFailure, JobSpec
from corral.engine.steps import StepRequest

TaskExits = tuple[tuple[int, int, int], ...]  # (rank, exit code, signal) of each task on one node


# ----- users

@dataclass(frozen=True, slots=True)
class SubmissionRequested:
    """A submission as the user states it (sbatch, corral submit, the REST API): admission, limits,
    reservation access, dependencies and arrays are decided by the engine (engine/submission.py); a
    refusal is an AdmissionError. Reply: (first job id, every array task's id, or [] for a plain job)."""

    request: JobSubmit


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    """One job spec the engine accepted (one job, or one array task); tests hand over specs they built.
    Reply: the Job."""

    spec: JobSpec
    held: bool = False


@dataclass(frozen=True, slots=True)
class CancelRequested:
    job_id: int
    uid: int | None = None
    reason: str = ""  # why, when the controller cancels by a policy (its history says so)
    note: str = ""  # a line for the job's log, written by the agent before the signal (a session's idle stop)


@dataclass(frozen=True, slots=True)
class SignalRequested:
    """scancel --signal: `scope` is "steps" (default), "batch" or "full"."""

    job_id: int
    signum: int
    scope: str = "steps"
    uid: int | None = None


@dataclass(frozen=True, slots=True)
class RequeueRequested:
    job_id: int


@dataclass(frozen=True, slots=True)
class UpdateRequested:
    """scontrol update: fields left None are not changed. Reply: the Job."""

    job_id: int
    name: str | None = None
    comment: str | None = None
    time_limit_s: int | None = None
    priority: int | None = None


@dataclass(frozen=True, slots=True)
class HoldRequested:
    """Hold (`held`) or release a pending job. Reply: the Job."""

    job_id: int
    held: bool


@dataclass(frozen=True, slots=True)
class StepRequested:
    """srun inside a running job. Reply: the Step."""

    job_id: int
    request: StepRequest


@dataclass(frozen=True, slots=True)
class AllocationCompleted:
    """An allocation's holder (salloc, or srun outside a job) is done with it."""

    job_id: int
    exit_code: int = 0
    signal: int = 0


# ----- agents

@dataclass(frozen=True, slots=True)
class NodeRegistered:
    """A node agent (re)joined, running and having finished these jobs. Reply: the job ids it must kill."""

    node: str
    inventory: Inventory
    running: frozenset[int] = frozenset()
    finished: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class NodeContacted:
    """An agent was heard from. Reply: False if the node is unknown or down (it must register again)."""

    node: str


@dataclass(frozen=True, slots=True)
class TasksStarted:
    node: str
    job_id: int
    # The run (the job's restart count) the report is about; None: the agent did not say (an older agent).
    restart_count: int | None = None
    # The ports the agent chose for a service replica's named ports on this node (NodeStarted.ports).
    ports: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class TasksFinished:
    """Every task of the job's own part on `node` has exited (or could not start: `error`). `fenced`: why the
    node's task leaders killed them (they lost contact with the controller: decision 0017), which is a node
    failure of the run. `infrastructure`: corral's own machinery failed under the tasks (their exits are not their
    own), also a node failure of the run, which the job's history and Reason name. `restart_count`: the run the
    report is about (None: the agent did not say); a report of an earlier run is ignored."""

    node: str
    job_id: int
    tasks: TaskExits = ()
    error: str | None = None
    oom_killed: bool = False
    usage: Mapping[str, Any] | None = None  # what the agent sampled (protocol.Usage), kept for sacct
    fenced: str | None = None
    restart_count: int | None = None
    infrastructure: InfrastructureFailure | None = None


@dataclass(frozen=True, slots=True)
class StepTasksFinished:
    """A step's tasks on `node` are done. `infrastructure`: corral's own machinery failed under them (the
    step ends NODE_FAIL, its other nodes' tasks are killed; the job runs on, as after its srun failed)."""

    node: str
    job_id: int
    step_id: int
    tasks: TaskExits = ()
    error: str | None = None
    oom_killed: bool = False
    usage: Mapping[str, Any] | None = None
    infrastructure: InfrastructureFailure | None = None


@dataclass(frozen=True, slots=True)
class NodeLost:
    node: str


@dataclass(frozen=True, slots=True)
class NodeUnhealthy:
    """The node's agent found it failing (a fatal XID, uncorrected ECC errors, the operator's health-check
    program exiting non-zero: agent/health.py). The node is drained with `reason` and its running jobs
    are stopped as for a lost node: requeued, or NODE_FAIL where they may not be."""

    node: str
    reason: str


# ----- operators

@dataclass(frozen=True, slots=True)
class DrainRequested:
    """Drain (or resume) a node. Reply: the Node. Refused with KeyError for an unknown node."""

    node: str
    drain: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class TenancyChanged:
    spec: TenancySpec


@dataclass(frozen=True, slots=True)
class ReservationAdded:
    """Reply: the Reservation."""

    spec: ReservationSpec


@dataclass(frozen=True, slots=True)
class ReservationRemoved:
    name: str


@dataclass(frozen=True, slots=True)
class ClusterStopRequested:
    """Stop every running job (requeue it or end it) and start nothing more. Reply: the ClusterStop."""


# ----- the controller itself and time

@dataclass(frozen=True, slots=True)
class ListenerStalled:
    """The controller could not listen for `stall_s`: no node's silence."""

    stall_s: float


@dataclass(frozen=True, slots=True)
class TimePassed:
    """Act on what is due: fair-share accrual, warning signals, time limits, kills to escalate, silent
    nodes, expired reservations."""


@dataclass(frozen=True, slots=True)
class CycleDue:
    """Run a scheduling cycle (start, reserve, preempt). The controller and the simulator send
    TimePassed and CycleDue together."""


@dataclass(frozen=True, slots=True)
class UsageAccrualDue:
    """Charge running jobs' fair-share usage up to now (TimePassed does it every ACCRUE_EVERY_S)."""


# ----- services (engine/service_events.py)

@dataclass(frozen=True, slots=True)
class ServiceApplied:
    """Create a service, or change its spec (a new revision: a rolling update). Reply: the Service; refused
    (AdmissionError naming what) when one replica of it could never be admitted."""

    spec: ServiceSpec
    user: str
    uid: int = 0


@dataclass(frozen=True, slots=True)
class ServiceScaled:
    name: str
    replicas: int


@dataclass(frozen=True, slots=True)
class ServiceRestartRequested:
    """Replace every replica, one after the other as in a rolling update (same spec, a new revision)."""

    name: str


@dataclass(frozen=True, slots=True)
class ServiceDeleted:
    name: str


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe's state on a replica's node, as the agent's ProbeRunner sees it: `ok`, how many results in
    a row say so, and the last check's words ("HTTP 500", "connection refused")."""

    ok: bool
    consecutive: int = 1
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ProbesReported:
    """A replica's probes changed on `node`: per probe kind ("startup", "readiness", "liveness")."""

    job_id: int
    node: str
    results: Mapping[str, ProbeResult]
    restart_count: int | None = None


@dataclass(frozen=True, slots=True)
class ServiceLoadReported:
    """The gateway's counts for a service (the autoscaler's input): requests in flight, requests/s, when."""

    name: str
    inflight: float
    rps: float
    at: float


Event = (SubmissionRequested | JobSubmitted | CancelRequested | SignalRequested | RequeueRequested
         | UpdateRequested | HoldRequested | StepRequested | AllocationCompleted | NodeRegistered | NodeContacted
         | TasksStarted | TasksFinished | StepTasksFinished | NodeLost | NodeUnhealthy | DrainRequested | TenancyChanged
         | ReservationAdded | ReservationRemoved | ClusterStopRequested | ListenerStalled | TimePassed | CycleDue
         | UsageAccrualDue | ServiceApplied | ServiceScaled | ServiceRestartRequested | ServiceDeleted | ProbesReported
         | ServiceLoadReported)
