"""What the engine asks the outside world to do. The controller turns these into agent messages; the
simulator turns them into simulated process ends."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Launch:
    job_id: int
    node: str


@dataclass(frozen=True, slots=True)
class LaunchStep:
    job_id: int
    step_id: int
    node: str


@dataclass(frozen=True, slots=True)
class Kill:
    """`signal` to a job's processes on `node`, then SIGKILL after `grace_s` (negative: signal only).
    `target`: "all", "steps" (step tasks only; `step_id` narrows it to one step) or "batch" (the batch
    shell or the job's own tasks). `reason` (corral.kill_reasons) makes the agent write slurmstepd's
    closing line for it; None: no line."""

    job_id: int
    node: str
    signal: int
    grace_s: float
    target: str = "all"
    step_id: int | None = None
    reason: str | None = None
    # Wait this long before the signal: a ready service replica being stopped, so that the gateway has
    # stopped routing to it (it left the endpoints at once) before it gets SIGTERM (docs/services.md).
    drain_s: float = 0.0
    # A line for the job's log after the closing line: why a policy stopped it (a session's idle stop).
    note: str | None = None


Command = Launch | LaunchStep | Kill
