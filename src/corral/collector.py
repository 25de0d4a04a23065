"""Python's garbage collector, set for a process that holds a large, long-lived heap and runs scheduling
cycles over it: the controller and the simulator (docs/architecture.md, "The collector").

A cycle over 100,000 pending jobs makes one record per job. With Python's default thresholds (700, 10,
10) those allocations set off a collection of the oldest generation whenever they pass a quarter of what
it holds, and that collection walks every object of the process (the restored jobs, nodes, views and the
base pool, none of them garbage): 0.1-0.2 s of a 0.45 s cycle at 10,000 nodes (bench/cycle.py).

`settle()` collects once, then moves every object left to the permanent generation (gc.freeze), which
no automatic collection walks again; objects made later are collected as usual. It also raises the
young generation's threshold, so that a cycle's 100,000 short-lived records pass through a few young
collections rather than 140. Frozen objects are still freed by reference counting; only reference cycles
among them would outlive their use, which is why a settle unfreezes and collects first: an engine that a
new one replaces (a restore after a failed commit, a standby taking the lease) is collected then."""
from __future__ import annotations

import gc

# Young collections after this many net allocations (default 700); the two older generations as the
# default (10) and twice it: a middle collection every 50,000 x 10 allocations, the oldest every
# 10 of those and only once what waits for it is a quarter of what it already holds.
THRESHOLDS = (50_000, 10, 20)


def settle() -> None:
    """Collect what is garbage now, freeze the rest, and use THRESHOLDS from here on. Call it once the
    long-lived state is built (the engine restored, the trace loaded), not per cycle: a settle is one full
    collection of the unfrozen heap."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
