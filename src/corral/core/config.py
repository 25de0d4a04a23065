"""The scheduler's configuration (`SchedulerConfig`) and the placement policies it may name (`PLACEMENTS`).

It sits above the pools and the policies: it resolves its policy when it is made, and nothing below imports
it (a policy is made from the numbers it needs, never from the configuration).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from corral.core.model import FGD_CPU_WEIGHT, TaskShape
from corral.core.placement import PlacementPolicy, bestfit, fgd, fgd_cpu

# Each policy's factory: made from the task mix and the CPU weight (those it does not use, it ignores).
_POLICIES: dict[str, Callable[[tuple[tuple[TaskShape, float], ...], float], PlacementPolicy]] = {
    "bestfit": bestfit.policy, "fgd": fgd.policy, "fgd+cpu": fgd_cpu.policy}
PLACEMENTS = tuple(_POLICIES)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    # How many blocked jobs, in priority order, get a reservation in the backfill timeline.
    # 1 is EASY backfill; larger values are closer to conservative backfill.
    max_reservations: int = 8
    # Backfill stops looking at pending jobs after this many (Slurm's bf_max_job_test); None: all.
    max_jobs_considered: int | None = None
    # Victim searches per cycle (each simulates removals on the whole pool).
    max_preemption_attempts: int = 32
    # False: strict FIFO per partition, as the Helios paper's baseline: once a job of a partition cannot
    # start, no later job of that partition starts in the cycle (no backfill, no reservations needed).
    backfill: bool = True
    # Node and device choice: "bestfit" (fewest free GPUs that fit; a fraction goes to the tightest shared
    # GPU) or "fgd" (fragmentation gradient descent, Weng et al. ATC'23: the node and GPU whose use least
    # increases the expected GPU capacity that `task_mix` could not use), or "fgd+cpu" (FGD whose
    # fragmentation also counts, weighted by `fgd_cpu_weight`, the free GPU capacity that copies of a typical
    # task could not get CPUs for: see core/fgd.py).
    placement: str = "bestfit"
    # The target workload for "fgd"/"fgd+cpu": typical task shapes with their probabilities (normalized).
    task_mix: tuple[tuple[TaskShape, float], ...] = ()
    # "fgd+cpu" only: weight of CPU-stranded GPU capacity in the fragmentation measure (0 = plain FGD).
    fgd_cpu_weight: float = FGD_CPU_WEIGHT

    # The policy `placement` names, made once from the fields above (core/placement/): what cycles use.
    placement_policy: PlacementPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement {self.placement!r}: one of {', '.join(PLACEMENTS)}")
        if self.fgd_cpu_weight < 0:
            raise ValueError(f"fgd_cpu_weight {self.fgd_cpu_weight}: must be >= 0")
        policy = _POLICIES[self.placement](self.task_mix, self.fgd_cpu_weight)
        object.__setattr__(self, "placement_policy", policy)
