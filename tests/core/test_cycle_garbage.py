"""A scheduling cycle leaves no reference cycles behind: everything it made is freed by reference counting
when its plan is, so a cycle sets off no collection of Python's collector in a later one (corral/collector.py
raises the young threshold above what one cycle holds at once, which only works if it frees it).

Once a working pool held its placement and the placement held the pool: every node a cycle copied (about
29,000 objects per cycle at 10,000 nodes) then waited for a collection, which walked them inside a later
cycle (bench/cycle.py)."""
from __future__ import annotations

import gc

import pytest

from corral.core.scheduler import schedule
from tests.core.test_cycle_decisions_pinned import CONFIGS, mixed_snapshot, with_base


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("way", ["views", "base"])
def test_a_cycle_leaves_no_cyclic_garbage(config: str, way: str) -> None:
    snap = mixed_snapshot(1, num_nodes=60, pending=600)
    if way == "base":
        snap = with_base(snap)
    gc.collect()
    gc.disable()
    try:
        plan = schedule(snap, CONFIGS[config])
        assert plan.starts, "the workload starts jobs (a cycle that copies no node would prove nothing)"
        del plan
        assert gc.collect() == 0, "unreachable objects: a reference cycle among the cycle's objects"
    finally:
        gc.enable()
