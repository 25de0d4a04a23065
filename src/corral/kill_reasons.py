"""Why corral stops a job's or a step's processes, and the line Slurm's slurmstepd writes about it.

The engine knows why it kills and sends the reason with its Kill command; the agent writes the line once
per job or step, on the job's (or step's) first node, into the stderr of its first task there, just before
the first signal and only while tasks still run: for a batch job that is the batch output file unless
--error separates stderr, for a step srun's stderr (or its --error file). Tools grep these lines, so the
texts are exactly those of Slurm 22.05 (src/slurmd/slurmstepd/req.c, _handle_signal_container), with
Slurm's time format (local time):

    slurmstepd: error: *** JOB 12 ON node1 CANCELLED AT 2026-11-24T08:14:13 DUE TO TIME LIMIT ***
    slurmstepd: error: *** STEP 12.0 ON node1 CANCELLED AT 2026-11-24T08:14:13 ***

Stdlib only: the agent imports it.
"""
from __future__ import annotations

import time

# scancel; a job whose batch script or holder ended while steps ran; SIGTERM or SIGKILL sent by
# `scancel --signal` (slurmstepd writes the line for those signals whoever sends them).
CANCELLED = "cancelled"
TIME_LIMIT = "time-limit"
PREEMPTION = "preemption"  # requeued or ended by preemption
NODE_FAILURE = "node-failure"
REQUEUE = "requeue"  # scontrol requeue
FAILURE = "failure"  # the job failed (its batch script exited non-zero, a node could not start it)

REASONS = (CANCELLED, TIME_LIMIT, PREEMPTION, NODE_FAILURE, REQUEUE, FAILURE)

PREFIX = "slurmstepd: error: "
_DUE_TO = {
    CANCELLED: "",
    TIME_LIMIT: " DUE TO TIME LIMIT",
    PREEMPTION: " DUE TO PREEMPTION",
    NODE_FAILURE: " DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS",
    REQUEUE: " DUE TO JOB REQUEUE",
}


def job_entity(job_id: int) -> str:
    return f"JOB {job_id}"


def step_entity(job_id: int, step_id: int) -> str:
    return f"STEP {job_id}.{step_id}"


def closing_line(reason: str, entity: str, node: str, when: float) -> str:
    """slurmstepd's line (with its newline) for `entity` ("JOB 12", "STEP 12.0") killed on `node` at
    `when` (seconds since the epoch, written as local time)."""
    if reason == FAILURE:
        return f"{PREFIX}*** {entity} ON {node} FAILED (non-zero exit code or other failure mode) ***\n"
    if reason not in _DUE_TO:
        raise ValueError(f"unknown kill reason {reason!r}")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(when))
    return f"{PREFIX}*** {entity} ON {node} CANCELLED AT {stamp}{_DUE_TO[reason]} ***\n"
