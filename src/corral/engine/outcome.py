"""How a job's end is decided from what its nodes reported."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from corral import kill_reasons
from corral.engine.records import NODE_FAILED, PREEMPTED, Job, JobState, NodeRun

# A job being stopped (COMPLETING) towards this final state: why, as slurmstepd tells it.
# Slurm's exit status of a job or step the kernel killed for memory: its dummy signal SIG_OOM (253), shown
# without the signal flag (0x80) as 0:125 by sacct and scontrol, whatever the tasks' own exits were.
OOM_EXIT = (0, 253 - 128)

_KILL_REASONS: dict[JobState | None, str] = {
    JobState.TIMEOUT: kill_reasons.TIME_LIMIT,
    JobState.PREEMPTED: kill_reasons.PREEMPTION,
    JobState.NODE_FAIL: kill_reasons.NODE_FAILURE,
    JobState.FAILED: kill_reasons.FAILURE,
}


def node_result(tasks: Iterable[tuple[int, int, int]], error: str | None, oom_killed: bool = False,
                usage: Mapping[str, Any] | None = None) -> NodeRun:
    """Fold one node's task exits (rank, exit_code, signal) into that node's part of the result."""
    run = NodeRun(started=True, finished=True, oom_killed=oom_killed,
                  usage=dict(usage) if usage is not None else None)
    if error is not None:
        run.exit_code = 1
        return run
    for _rank, code, sig in tasks:
        run.exit_code = max(run.exit_code, code)
        if sig and not run.signal:
            run.signal = sig
    return run


def final_state(job: Job) -> JobState:
    if job.final_state is not None:
        return job.final_state
    if any(r.oom_killed for r in job.runs.values()):
        return JobState.OUT_OF_MEMORY  # as Slurm: whatever the exit code, the job went over its --mem
    if any(r.exit_code or r.signal for r in job.runs.values()):
        return JobState.FAILED
    return JobState.COMPLETED


def fold_exit(job: Job) -> tuple[int, int]:
    """The job's (exit_code, signal): the largest exit code and the first signal among its nodes, or
    Slurm's 0:125 when it went over its memory."""
    if any(r.oom_killed for r in job.runs.values()):
        return OOM_EXIT
    code = max((r.exit_code for r in job.runs.values()), default=0)
    sig = next((r.signal for r in job.runs.values() if r.signal), 0)
    return code, sig


def kill_reason(job: Job) -> str:
    """Why the engine stops the job's processes (corral.kill_reasons), from the state it will end in:
    a requeue is a preemption's or a requested one's; a cancel, or a completed batch script whose steps
    still run, is a plain cancel."""
    if job.final_state is JobState.PENDING:
        if job.stop_cause == NODE_FAILED:
            return kill_reasons.NODE_FAILURE
        return kill_reasons.PREEMPTION if job.stop_cause == PREEMPTED else kill_reasons.REQUEUE
    return _KILL_REASONS.get(job.final_state, kill_reasons.CANCELLED)
