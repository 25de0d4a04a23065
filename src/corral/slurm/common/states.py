"""Job and node state names as Slurm prints them (job_state_string, job_state_string_compact,
node_state_string)."""
from __future__ import annotations

from _collections_abc import Mapping

# Base states in Slurm's numeric order (enum job_states up to JOB_END), then the flag states.
BASE_STATES = (
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
)
# The order squeue lists them in its "Valid job states include:" message.
VALID_STATES_MESSAGE_ORDER = (
    *BASE_STATES, "COMPLETING", "CONFIGURING", "RESIZING", "RESV_DEL_HOLD", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "REVOKED", "SIGNALING", "SPECIAL_EXIT", "STAGE_OUT", "STOPPED",
)
COMPACT: Mapping[str, str] = {
    "PENDING": "PD", "RUNNING": "R", "SUSPENDED": "S", "COMPLETED": "CD", "CANCELLED": "CA",
    "FAILED": "F", "TIMEOUT": "TO", "NODE_FAIL": "NF", "PREEMPTED": "PR", "BOOT_FAIL": "BF",
    "DEADLINE": "DL", "OUT_OF_MEMORY": "OOM", "COMPLETING": "CG", "CONFIGURING": "CF",
    "STAGE_OUT": "SO", "RESIZING": "RS", "REQUEUED": "RQ", "REQUEUE_FED": "RF", "REQUEUE_HOLD": "RH",
    "SPECIAL_EXIT": "SE", "STOPPED": "ST", "REVOKED": "RV", "RESV_DEL_HOLD": "RD", "SIGNALING": "SI",
}
_BY_NAME = {name: name for name in COMPACT} | {short: name for name, short in COMPACT.items()}
# What squeue lists when no --states is given: jobs that are not finished.
ACTIVE_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STAGE_OUT", "RESIZING", "SIGNALING",
    "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SPECIAL_EXIT", "STOPPED",
})
# The base state a flag state belongs to, for filtering: a COMPLETING job is RUNNING to `-t R`.
FLAG_BASE: Mapping[str, str] = {
    "COMPLETING": "RUNNING", "CONFIGURING": "RUNNING", "STAGE_OUT": "RUNNING", "RESIZING": "RUNNING",
    "SIGNALING": "RUNNING", "REQUEUED": "PENDING", "REQUEUE_FED": "PENDING", "REQUEUE_HOLD": "PENDING",
    "RESV_DEL_HOLD": "PENDING", "SPECIAL_EXIT": "PENDING", "STOPPED": "RUNNING",
}

# The states corral's jobs take (corral.engine.records.JobState): what the controller filters by.
CORRAL_STATES = frozenset({"PENDING", "RUNNING", "PREEMPTED", "COMPLETING", "COMPLETED", "FAILED", "CANCELLED",
                           "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"})


def job_state(job: Mapping) -> str:
    """The long name (corral's states are Slurm's names already)."""
    return str(job.get("state", "PENDING")).upper()


def job_state_compact(job: Mapping) -> str:
    state = job_state(job)
    return COMPACT.get(state, state[:2])


def parse_job_state(text: str) -> str | None:
    """A state as users type it (`pd`, `Running`, `CA`) -> its long name; None if unknown."""
    return _BY_NAME.get(text.strip().upper())


def sacct_state(job: Mapping) -> str:
    """sacct's State: `CANCELLED by <uid>` when the canceller is known."""
    state = job_state(job)
    canceller = job.get("cancelled_by_uid")
    if state == "CANCELLED" and canceller is not None:
        return f"CANCELLED by {canceller}"
    return state


# corral's node states -> (sinfo %t, sinfo %T, Slurm's numeric node_state). A draining node still
# runs jobs; a drained one is empty. corral marks a node down when its agent stops answering:
# Slurm's "*" (not responding). "planned": idle, but held for a job the backfill plans to start.
# The number (base state | flags: DRAIN 0x200, NO_RESPOND 0x800, PLANNED 0x200000) orders sinfo's
# lines: sinfo sorts by it, descending.
_NODE_STATES: Mapping[str, tuple[str, str, int]] = {
    "idle": ("idle", "idle", 2),
    "mixed": ("mix", "mixed", 5),
    "allocated": ("alloc", "allocated", 3),
    "draining": ("drng", "draining", 5 | 0x200),
    "drained": ("drain", "drained", 2 | 0x200),
    "down": ("down*", "down*", 1 | 0x800),
    "planned": ("plnd", "planned", 2 | 0x200000),
}


def node_state_compact(node: Mapping) -> str:
    state = str(node.get("state", ""))
    return _NODE_STATES[state][0] if state in _NODE_STATES else state


def node_state_long(node: Mapping) -> str:
    state = str(node.get("state", ""))
    return _NODE_STATES[state][1] if state in _NODE_STATES else state


def node_state_rank(node: Mapping) -> int:
    return _NODE_STATES.get(str(node.get("state", "")), ("", "", 0))[2]


def node_state_scontrol(node: Mapping) -> str:
    """scontrol's State=: the base state in capitals plus +DRAIN / +NOT_RESPONDING flags."""
    state = node.get("state", "")
    busy = "ALLOCATED" if node.get("cpus_alloc", 0) >= node.get("cpus", 1) else "MIXED"
    if state in ("draining", "drained"):
        base = "IDLE" if state == "drained" else busy
        return f"{base}+DRAIN"
    if state == "down":
        return "DOWN+NOT_RESPONDING"
    if state == "planned":
        return "IDLE+PLANNED"
    return str(state).upper()
