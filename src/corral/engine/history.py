"""A job's history (Job.history): one typed record per kind of event the engine notes, and the one codec
to and from the JSON the store keeps and the REST API shows (JobOut.history).

The JSON is what the engine wrote as dicts before these records existed, key for key and in the same order
(`{"t": ..., "event": "requeued", "run_start": ..., "run_end": ...}`), so rows written then read back as
records and records write the same rows. An optional field a record leaves at None is left out of the JSON
where the old dicts left the key out (`OMITTED_WHEN_NONE`), and kept as null where they wrote null. An entry
this code does not know (an event kind, or a key, from another version) reads back as Unrecognised and is
written back unchanged: nothing stored is lost.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

# Why a running job is stopped to go back to PENDING (Job.stop_cause), as its history names the event.
PREEMPTED, REQUEUE_REQUESTED, CLUSTER_STOPPED = "preempted", "requeue-requested", "cluster-stopped"
NODE_FAILED = "node-failed"  # one of its nodes was lost (timed out, or its agent came back without the job)
# corral's own machinery failed under the run on a node (its task leader killed, its cgroup removed, the
# agent lost track of it): the history names it, the job's Reason says it; it counts as that node's failure.
INFRA_FAILED = "infrastructure-failed"
# A node in development mode ran the job's tasks as its agent's user, not as the job's.
AS_AGENT_USER = "ran-as-agent-user"
LIVENESS_FAILED = "liveness-failed"  # a service replica's liveness probe failed (engine/service_events.py)

# dataclasses.field metadata: the key is absent from the JSON while the value is None.
OMITTED_WHEN_NONE = {"omitted_when_none": True}


def _optional() -> Any:
    return dataclasses.field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """What every entry has: when (engine time, epoch seconds). `EVENT`: its `event` in the JSON."""

    EVENT: ClassVar[str] = ""
    t: float


@dataclass(frozen=True, slots=True)
class Preempted(HistoryEntry):
    """Stopped to make room for job `by` (`cause`: reclaim, priority, ...)."""

    EVENT: ClassVar[str] = PREEMPTED
    by: int
    cause: str


@dataclass(frozen=True, slots=True)
class Preempting(HistoryEntry):
    """This job stopped `victim` to make room for itself."""

    EVENT: ClassVar[str] = "preempting"
    victim: int
    cause: str


@dataclass(frozen=True, slots=True)
class WarningSignalSent(HistoryEntry):
    """Its --signal warning went out before the time limit."""

    EVENT: ClassVar[str] = "signal"
    signal: int


@dataclass(frozen=True, slots=True)
class NodeFailed(HistoryEntry):
    """One of its nodes was lost; `outcome` ("requeued", or the state it ends in) when it was running."""

    EVENT: ClassVar[str] = NODE_FAILED
    node: str
    outcome: str | None = _optional()


@dataclass(frozen=True, slots=True)
class InfrastructureFailed(HistoryEntry):
    """corral's own machinery failed under its run on `node` (of step `step`, or of the job's own tasks)."""

    EVENT: ClassVar[str] = INFRA_FAILED
    node: str
    step: int | None = _optional()
    kind: str = dataclasses.field(kw_only=True)
    reason: str = dataclasses.field(kw_only=True)
    outcome: str | None = _optional()


@dataclass(frozen=True, slots=True)
class Requeued(HistoryEntry):
    """Back to PENDING after the run from `run_start` to `run_end`; `cause` after a node failure."""

    EVENT: ClassVar[str] = "requeued"
    run_start: float | None
    run_end: float
    cause: str | None = _optional()


@dataclass(frozen=True, slots=True)
class NodesHeld(HistoryEntry):
    """Its healthy nodes are held for it until `until` (an expedited requeue)."""

    EVENT: ClassVar[str] = "nodes-held"
    nodes: tuple[str, ...]
    until: float | None


@dataclass(frozen=True, slots=True)
class RanAsAgentUser(HistoryEntry):
    """Its tasks on `node` ran as the agent's user `user`, not as the job's."""

    EVENT: ClassVar[str] = AS_AGENT_USER
    node: str
    user: str


@dataclass(frozen=True, slots=True)
class ClusterStopped(HistoryEntry):
    """The cluster stopped under it: "requeued", or the state it ended in."""

    EVENT: ClassVar[str] = CLUSTER_STOPPED
    outcome: str


@dataclass(frozen=True, slots=True)
class Cancelled(HistoryEntry):
    """Cancelled by `uid` (None: by the controller, for `reason`)."""

    EVENT: ClassVar[str] = "cancelled"
    uid: int | None
    reason: str | None = _optional()


@dataclass(frozen=True, slots=True)
class RequeueRequested(HistoryEntry):
    """scontrol requeue."""

    EVENT: ClassVar[str] = REQUEUE_REQUESTED


@dataclass(frozen=True, slots=True)
class Held(HistoryEntry):
    """scontrol hold: the pending job is kept from starting until released."""

    EVENT: ClassVar[str] = "held"


@dataclass(frozen=True, slots=True)
class Released(HistoryEntry):
    """scontrol release: a held job may start again."""

    EVENT: ClassVar[str] = "released"


@dataclass(frozen=True, slots=True)
class Signaled(HistoryEntry):
    """scancel --signal: `signal` to `scope` (steps, batch, full), asked by `uid`."""

    EVENT: ClassVar[str] = "signaled"
    signal: int
    scope: str
    uid: int | None


@dataclass(frozen=True, slots=True)
class Updated(HistoryEntry):
    """scontrol update: the fields it changed."""

    EVENT: ClassVar[str] = "updated"
    name: str | None = _optional()
    comment: str | None = _optional()
    priority: int | None = _optional()
    time_limit_s: float | None = _optional()


@dataclass(frozen=True, slots=True)
class Completed(HistoryEntry):
    """An allocation's holder ended it with this exit status."""

    EVENT: ClassVar[str] = "completed"
    exit_code: int
    signal: int


@dataclass(frozen=True, slots=True)
class LivenessFailed(HistoryEntry):
    """A service replica's liveness probe failed on `node` (`detail`: how often, and why)."""

    EVENT: ClassVar[str] = LIVENESS_FAILED
    node: str
    detail: str


@dataclass(frozen=True, slots=True)
class Restarting(HistoryEntry):
    """A service replica restarts in place after `delay_s` (`detail`: the restart's line)."""

    EVENT: ClassVar[str] = "restarting"
    detail: str
    delay_s: float


@dataclass(frozen=True, slots=True)
class ReplicaStopped(HistoryEntry):
    """The service's reconciler stopped this replica (`reason`: scaled down, updated, deleted)."""

    EVENT: ClassVar[str] = "replica-stopped"
    reason: str


@dataclass(frozen=True, slots=True)
class Unrecognised(HistoryEntry):
    """An entry this code does not know, kept as it was stored (`event`, and its other keys in order)."""

    event: str = ""
    rest: tuple[tuple[str, Any], ...] = ()


KINDS: dict[str, type[HistoryEntry]] = {kind.EVENT: kind for kind in (
    Preempted, Preempting, WarningSignalSent, NodeFailed, InfrastructureFailed, Requeued, NodesHeld,
    RanAsAgentUser, ClusterStopped, Cancelled, RequeueRequested, Held, Released, Signaled, Updated, Completed,
    LivenessFailed, Restarting, ReplicaStopped)}


def history_to_json(entry: HistoryEntry) -> dict[str, Any]:
    """The entry as stored: `t`, `event`, then its fields in order (those OMITTED_WHEN_NONE only when set)."""
    if isinstance(entry, Unrecognised):
        return {"t": entry.t, "event": entry.event, **dict(entry.rest)}
    out: dict[str, Any] = {"t": entry.t, "event": entry.EVENT}
    for field in dataclasses.fields(entry)[1:]:
        value = getattr(entry, field.name)
        if value is None and field.metadata.get("omitted_when_none"):
            continue
        out[field.name] = list(value) if isinstance(value, tuple) else value
    return out


def history_from_json(stored: dict[str, Any]) -> HistoryEntry:
    """The record of a stored entry; Unrecognised when its event, or one of its keys, is not this code's."""
    t, event = stored.get("t", 0.0), str(stored.get("event", ""))
    rest = {key: value for key, value in stored.items() if key not in ("t", "event")}
    kind = KINDS.get(event)
    if kind is not None:
        names = {field.name for field in dataclasses.fields(kind)[1:]}
        values = {key: tuple(value) if isinstance(value, list) else value for key, value in rest.items()}
        if set(rest) <= names:
            try:
                return kind(t, **values)
            except TypeError:  # a required field missing: kept as stored, below
                pass
    return Unrecognised(t, event, tuple(rest.items()))
