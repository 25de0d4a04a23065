"""FGD+CPU placement ("fgd+cpu"): FGD whose fragmentation also counts, weighted by
`SchedulerConfig.fgd_cpu_weight`, the free GPU capacity that copies of a typical task could not get CPUs for
(the CPU-stranded variant of core/fgd.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from corral.core.fgd import scorer_for
from corral.core.placement.fgd import with_scorer

if TYPE_CHECKING:
    from corral.core.model import TaskShape
    from corral.core.placement import PlacementPolicy


def policy(task_mix: tuple[tuple[TaskShape, float], ...], fgd_cpu_weight: float) -> PlacementPolicy:
    return with_scorer(scorer_for(task_mix, fgd_cpu_weight))
