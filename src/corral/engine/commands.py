"""What the engine asks the outside world to do. The controller turns these into agent messages; the
simulator turns them into simulated process ends."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Launch:
    job_id: int
    node: str


@dataclass(frozen=True, slots=True)
class Kill:
    job_id: int
    node: str
    signal: int
    grace_s: float


Command = Launch | Kill
