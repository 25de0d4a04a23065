"""Time-limit model: the public traces record runtimes but not the limits users asked for, and
backfill plans with limits, so a replay needs plausible ones.

Users over-estimate (often by a lot) and pick round values (Tsafrir et al., "Modeling User Runtime
Estimates", 2005). The model: limit = runtime x a factor drawn per job uniformly from
`over_estimate`, rounded up to the next of the round values `round_up_to_s` (past the largest, to a
multiple of it), capped at `cap_s` — but never below the runtime itself, since a trace job that ran
that long evidently had a limit that let it (so the replay never kills real work).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from corral.sim.workload import Workload

MINUTE_S, HOUR_S, DAY_S = 60, 3600, 86400
DEFAULT_ROUND_UP_TO_S = (15 * MINUTE_S, HOUR_S, 4 * HOUR_S, 12 * HOUR_S, DAY_S, 2 * DAY_S, 7 * DAY_S)


@dataclass(frozen=True)
class TimeLimitModel:
    over_estimate: tuple[float, float] = (1.0, 3.0)  # limit / runtime, drawn uniformly per job
    round_up_to_s: tuple[int, ...] = DEFAULT_ROUND_UP_TO_S
    cap_s: int | None = 7 * DAY_S  # the largest limit users may ask for (a partition's MaxTime)
    seed: int = 0
    keep_known: bool = True  # a job whose trace has a limit keeps it

    def __post_init__(self) -> None:
        low, high = self.over_estimate
        if not 1.0 <= low <= high:
            raise ValueError(f"over_estimate {self.over_estimate}: need 1 <= low <= high (limits below runtimes "
                             f"would kill jobs the trace shows finishing)")
        steps = tuple(sorted(int(s) for s in self.round_up_to_s))
        if any(s <= 0 for s in steps):
            raise ValueError(f"round_up_to_s {self.round_up_to_s}: steps must be positive")
        object.__setattr__(self, "round_up_to_s", steps)
        if self.cap_s is not None and self.cap_s <= 0:
            raise ValueError(f"cap_s {self.cap_s} <= 0")

    def limit_s(self, duration_s: float, factor: float) -> int:
        """The limit for one job, given its drawn over-estimation factor."""
        padded = self.round_up(duration_s * factor)
        if self.cap_s is not None:
            padded = min(padded, self.cap_s)
        return max(padded, math.ceil(duration_s), 1)

    def round_up(self, seconds: float) -> int:
        for step in self.round_up_to_s:
            if seconds <= step:
                return step
        if not self.round_up_to_s:
            return max(1, math.ceil(seconds))
        largest = self.round_up_to_s[-1]
        return largest * math.ceil(seconds / largest)

    def factors(self, count: int) -> np.ndarray:
        """The per-job factors, drawn in one go so a seed fixes them for the whole workload."""
        low, high = self.over_estimate
        return np.random.default_rng(self.seed).uniform(low, high, size=count)

    def apply(self, workload: Workload) -> Workload:
        """A copy of the workload with limits; factors are drawn in submission order (one per job,
        also for jobs that keep a known limit, so adding limits to some jobs never reshuffles the rest)."""
        factors = self.factors(len(workload.jobs))
        jobs = []
        for job, factor in zip(workload.jobs, factors, strict=True):
            if self.keep_known and job.time_limit_s is not None:
                jobs.append(job)
            else:
                jobs.append(replace(job, time_limit_s=self.limit_s(job.duration_s, float(factor))))
        return workload.with_jobs(jobs, self.describe())

    def describe(self) -> str:
        low, high = self.over_estimate
        steps = ", ".join(human_duration(s) for s in self.round_up_to_s) or "whole seconds"
        text = (f"Time limits are not in the trace, so they are modelled: each job's limit is its real runtime "
                f"times a factor drawn uniformly from [{low:g}, {high:g}] (numpy PCG64, seed {self.seed}, one "
                f"draw per job in submission order), rounded up to the next of {steps}")
        if self.round_up_to_s:
            text += f" (beyond that, to a multiple of {human_duration(self.round_up_to_s[-1])})"
        if self.cap_s is not None:
            text += f", capped at {human_duration(self.cap_s)}"
        text += ("; a limit is never below the job's runtime, so no job is killed for running as long as it "
                 "really did.")
        if self.keep_known:
            text += " Jobs whose trace records a limit keep it."
        return text


def human_duration(seconds: float) -> str:
    """Compact duration for reports: 45 s, 15 min, 4 h, 7 d, 1 h 30 min."""
    seconds = int(round(seconds))
    parts: list[str] = []
    for unit_s, unit in ((DAY_S, "d"), (HOUR_S, "h"), (MINUTE_S, "min"), (1, "s")):
        if seconds >= unit_s or (unit == "s" and not parts):
            count, seconds = divmod(seconds, unit_s)
            parts.append(f"{count} {unit}")
        if len(parts) == 2:
            break
    return " ".join(parts)
