"""The after-run decision and the job-kind table, as tables."""
from __future__ import annotations

import dataclasses

import pytest

from corral.core.model import NodeSlice
from corral.engine.after_run import (
    Finish,
    Requeue,
    RequeueBackoff,
    after_run,
    may_requeue,
    stop_towards,
)
from corral.engine.kinds import ALLOCATION, BATCH, COMMAND, kind_from_flags
from corral.engine.records import (
    CLUSTER_STOPPED,
    NODE_FAILED,
    PREEMPTED,
    REQUEUE_REQUESTED,
    Job,
    JobState,
    NodeRun,
)
from tests.engine.builders import spec

BACKOFF = RequeueBackoff(initial_s=10.0, max_s=600.0)


def job(final: JobState | None = None, cause: str = "", preemptions: int = 0, exit_code: int = 0, sig: int = 0,
        oom: bool = False) -> Job:
    run = NodeRun(started=True, finished=True, exit_code=exit_code, signal=sig, oom_killed=oom)
    return Job(id=1, spec=spec(), submit_time=0.0, state=JobState.COMPLETING, final_state=final,
               stop_cause=cause, preemptions=preemptions, runs={"node1": run})


@pytest.mark.parametrize(("case", "want"), [
    (job(), Finish(JobState.COMPLETED)),
    (job(exit_code=3), Finish(JobState.FAILED)),
    (job(sig=9), Finish(JobState.FAILED)),
    (job(oom=True), Finish(JobState.OUT_OF_MEMORY)),
    (job(final=JobState.CANCELLED, exit_code=3), Finish(JobState.CANCELLED)),
    (job(final=JobState.TIMEOUT), Finish(JobState.TIMEOUT)),
    (job(final=JobState.NODE_FAIL), Finish(JobState.NODE_FAIL)),
    (job(final=JobState.PREEMPTED), Finish(JobState.PREEMPTED)),
    (job(final=JobState.PENDING, cause=PREEMPTED, preemptions=1), Requeue(None)),
    (job(final=JobState.PENDING, cause=PREEMPTED, preemptions=2), Requeue(10.0)),
    (job(final=JobState.PENDING, cause=PREEMPTED, preemptions=4), Requeue(40.0)),
    (job(final=JobState.PENDING, cause=PREEMPTED, preemptions=30), Requeue(600.0)),
    (job(final=JobState.PENDING, cause=NODE_FAILED, preemptions=5), Requeue(None)),
    (job(final=JobState.PENDING, cause=REQUEUE_REQUESTED), Requeue(None)),
    (job(final=JobState.PENDING, cause=CLUSTER_STOPPED), Requeue(None)),
])
def test_after_run(case: Job, want: object) -> None:
    assert after_run(case, BACKOFF) == want


BATCH_SPEC = dataclasses.replace(spec(), batch=True)
ALLOC_SPEC = dataclasses.replace(spec(), allocation=True)
NO_REQUEUE = dataclasses.replace(spec(), requeue=False)
SESSION_SPEC = dataclasses.replace(spec(), session=True)  # requeue left True: the kind alone refuses


@pytest.mark.parametrize(("job_spec", "cause", "mode", "want"), [
    (spec(), PREEMPTED, "requeue", JobState.PENDING),
    (spec(), PREEMPTED, "cancel", JobState.PREEMPTED),
    (NO_REQUEUE, PREEMPTED, "requeue", JobState.PREEMPTED),
    # As Slurm (job_requeue refuses what is not batch, and the preemption kills it): an allocation's holder
    # and a session's kernels would not come back, so neither waits requeued.
    (ALLOC_SPEC, PREEMPTED, "requeue", JobState.PREEMPTED),
    (SESSION_SPEC, PREEMPTED, "requeue", JobState.PREEMPTED),
    (BATCH_SPEC, PREEMPTED, "requeue", JobState.PENDING),
    (spec(), NODE_FAILED, "requeue", JobState.PENDING),
    (NO_REQUEUE, NODE_FAILED, "requeue", JobState.NODE_FAIL),
    (ALLOC_SPEC, NODE_FAILED, "requeue", JobState.NODE_FAIL),
    (BATCH_SPEC, CLUSTER_STOPPED, "requeue", JobState.PENDING),
    (ALLOC_SPEC, CLUSTER_STOPPED, "requeue", JobState.NODE_FAIL),
    (NO_REQUEUE, REQUEUE_REQUESTED, "requeue", JobState.PENDING),
])
def test_stop_towards(job_spec, cause: str, mode: str, want: JobState) -> None:
    assert stop_towards(job_spec, cause, mode) is want


def test_unknown_stop_cause_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown stop cause 'bored'"):
        stop_towards(spec(), "bored")


def test_kind_is_derived_from_the_stored_flags() -> None:
    assert spec().kind is COMMAND
    assert BATCH_SPEC.kind is BATCH
    assert ALLOC_SPEC.kind is ALLOCATION
    assert dataclasses.replace(spec(), batch=True, allocation=True).kind is ALLOCATION
    assert kind_from_flags(batch=False, allocation=False) is COMMAND
    assert not may_requeue(ALLOC_SPEC) and may_requeue(BATCH_SPEC) and not may_requeue(NO_REQUEUE)


SLICES = (NodeSlice("n1", (0,), 1, 0), NodeSlice("n2", (0,), 1, 0), NodeSlice("n3", (0,), 1, 0))


@pytest.mark.parametrize(("kind", "launched", "tasks", "own_scope", "open_mode"), [
    (BATCH, ("n1",), 1, "batch", "truncate"),
    (COMMAND, ("n1", "n2", "n3"), 4, "steps", "append"),
    (ALLOCATION, ("n1",), 4, "steps", "append"),
])
def test_kind_rows(kind, launched, tasks, own_scope, open_mode) -> None:
    assert tuple(s.node for s in kind.launched(SLICES)) == launched
    assert kind.tasks_on_node(4) == tasks
    assert kind.own_scope == own_scope
    assert kind.default_open_mode == open_mode
    assert kind.launches_tasks is (kind is not ALLOCATION)
    assert kind.completed_by_holder is (kind is ALLOCATION)
