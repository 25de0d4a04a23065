"""Job history records (engine/history.py): one codec to and from the stored JSON, which is what the engine
wrote as dicts before the records existed, so old rows read back and records write the same rows."""
from __future__ import annotations

import json

import pytest

from corral.engine.history import (
    KINDS,
    Cancelled,
    ClusterStopped,
    Completed,
    Held,
    HistoryEntry,
    InfrastructureFailed,
    LivenessFailed,
    NodeFailed,
    NodesHeld,
    Preempted,
    Preempting,
    RanAsAgentUser,
    Released,
    ReplicaStopped,
    Requeued,
    RequeueRequested,
    Restarting,
    Signaled,
    Unrecognised,
    Updated,
    WarningSignalSent,
    history_from_json,
    history_to_json,
)
from corral.store.codec import job_from_row, job_to_row
from tests.store.factories import full_job

T = 1_700_000_000.5

# Every kind, with its optional fields set and unset.
RECORDS: list[HistoryEntry] = [
    Preempted(T, 7, "reclaim"),
    Preempting(T, 3, "priority"),
    WarningSignalSent(T, 10),
    NodeFailed(T, "node1"),
    NodeFailed(T, "node1", "requeued"),
    InfrastructureFailed(T, "node1", kind="leader-killed", reason="task leader of rank 0 killed"),
    InfrastructureFailed(T, "node1", kind="cgroup-removed", reason="gone", outcome="NODE_FAIL"),
    InfrastructureFailed(T, "node2", 0, kind="leader-killed", reason="killed"),
    Requeued(T, T - 60, T),
    Requeued(T, None, T, "node failure node1"),
    NodesHeld(T, ("node2", "node3"), T + 300),
    RanAsAgentUser(T, "node2", "bob"),
    ClusterStopped(T, "requeued"),
    Cancelled(T, 1000),
    Cancelled(T, None, "gpu-idle"),
    RequeueRequested(T),
    Held(T),
    Released(T),
    Signaled(T, 10, "batch", 1000),
    Signaled(T, 15, "steps", None),
    Updated(T, name="renamed"),
    Updated(T, comment="c", priority=5, time_limit_s=3600.0),
    Completed(T, 0, 0),
    LivenessFailed(T, "node1", "liveness probe failed 3 times: HTTP 500"),
    Restarting(T, "replica 0 restarted: exited with 1 (in 10 s)", 10.0),
    ReplicaStopped(T, "scaled down to 2"),
]

# Entries exactly as the engine wrote them before they were records (the dict literals of each call site).
OLD_ROWS: list[dict] = [
    {"t": T, "event": "preempted", "by": 7, "cause": "reclaim"},
    {"t": T, "event": "preempting", "victim": 3, "cause": "priority"},
    {"t": T, "event": "signal", "signal": 10},
    {"t": T, "event": "node-failed", "node": "node1", "outcome": "requeued"},
    {"t": T, "event": "infrastructure-failed", "node": "node1", "kind": "leader-killed", "reason": "killed",
     "outcome": "requeued"},
    {"t": T, "event": "infrastructure-failed", "node": "node1", "step": 0, "kind": "leader-killed", "reason": "r"},
    {"t": T, "event": "requeued", "run_start": T - 60, "run_end": T, "cause": "node failure node1"},
    {"t": T, "event": "requeued", "run_start": T - 60, "run_end": T},
    {"t": T, "event": "nodes-held", "nodes": ["node2"], "until": T + 300},
    {"t": T, "event": "ran-as-agent-user", "node": "node2", "user": "bob"},
    {"t": T, "event": "cluster-stopped", "outcome": "NODE_FAIL"},
    {"t": T, "event": "cancelled", "uid": None, "reason": "gpu-idle"},
    {"t": T, "event": "cancelled", "uid": 1000},
    {"t": T, "event": "requeue-requested"},
    {"t": T, "event": "signaled", "signal": 10, "scope": "steps", "uid": 1000},
    {"t": T, "event": "updated", "name": "n", "priority": 3, "time_limit_s": 60.0},
    {"t": T, "event": "completed", "exit_code": 2, "signal": 0},
    {"t": T, "event": "liveness-failed", "node": "node1", "detail": "liveness probe failed 3 times"},
    {"t": T, "event": "restarting", "detail": "replica 0 restarted", "delay_s": 20.0},
    {"t": T, "event": "replica-stopped", "reason": "replaced by revision 2"},
]


# Kinds first written after history became records: no old row of theirs exists.
NEW_SINCE_RECORDS = {"held", "released"}


def test_every_kind_is_in_the_table_and_in_these_tests() -> None:
    assert {type(r) for r in RECORDS} == set(KINDS.values())
    assert {row["event"] for row in OLD_ROWS} == set(KINDS) - NEW_SINCE_RECORDS


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: f"{type(r).__name__}")
def test_a_record_round_trips_through_stored_json(record: HistoryEntry) -> None:
    stored = json.loads(json.dumps(history_to_json(record)))
    assert stored["event"] == record.EVENT and stored["t"] == T
    assert history_from_json(stored) == record


@pytest.mark.parametrize("row", OLD_ROWS, ids=lambda row: row["event"])
def test_a_row_the_old_code_wrote_reads_as_its_record_and_is_written_back_key_for_key(row: dict) -> None:
    record = history_from_json(row)
    assert isinstance(record, KINDS[row["event"]])
    assert list(history_to_json(record).items()) == list(row.items())


def test_what_this_code_does_not_know_is_kept_as_stored() -> None:
    unknown_kind = {"t": T, "event": "teleported", "to": "mars", "by": 7}
    unknown_key = {"t": T, "event": "preempted", "by": 7, "cause": "reclaim", "note": "from a newer version"}
    missing_key = {"t": T, "event": "preempted", "by": 7}
    for row in (unknown_kind, unknown_key, missing_key):
        record = history_from_json(row)
        assert isinstance(record, Unrecognised)
        assert list(history_to_json(record).items()) == list(row.items())


def test_a_job_row_with_the_old_history_reads_back_typed_and_is_stored_unchanged() -> None:
    row = job_to_row(full_job(7))
    row["extra"]["history"] = [dict(entry) for entry in OLD_ROWS]

    class Row:
        def __getattr__(self, name: str) -> object:
            return row[name]

    job = job_from_row(Row())
    assert [type(h) for h in job.history] == [KINDS[entry["event"]] for entry in OLD_ROWS]
    assert job.history[0] == Preempted(T, 7, "reclaim")
    assert job_to_row(job)["extra"]["history"] == OLD_ROWS
