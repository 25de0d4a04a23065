"""Python's garbage collector, set for a process that holds a large, long-lived heap and runs scheduling
cycles over it: the controller and the simulator (docs/architecture.md, "The collector").

A cycle over 100,000 pending jobs makes one record per job. With Python's default thresholds (700, 10,
10) those allocations set off a collection of the oldest generation whenever they pass a quarter of what
it holds, and that collection walks every object of the process (the restored jobs, nodes, views and the
base pool, none of them garbage): 0.1-0.2 s of a 0.45 s cycle at 10,000 nodes (bench/cycle.py).

`settle()` collects once, then moves every object left to the permanent generation (gc.freeze), which
no automatic collection walks again; objects made later are collected as usual. It also raises the
young generation's threshold above what one cycle holds at once: a cycle's records are freed with its
plan (reference counting lowers the count again), so a cycle over 100,000 pending jobs sets off no
collection at all, where 50,000 still set off two of 50-100 ms each. Frozen objects are still freed by
reference counting; only reference cycles among them would outlive their use, which is why a settle
unfreezes and collects first: an engine that a new one replaces (a restore after a failed commit, a
standby taking the lease) is collected then."""
from __future__ import annotations

import gc

# A young collection after this many net allocations of tracked objects (default 700; at most this many
# objects of cyclic garbage wait for it); a middle one every 10 young ones; the oldest every 20 middle
# ones and only once what waits for it is a quarter of what it already holds.
THRESHOLDS = (250_000, 10, 20)


def settle() -> None:
    """Collect what is garbage now, freeze the rest, and use THRESHOLDS from here on. Call it once the
    long-lived state is built (the engine restored, the trace loaded), not per cycle: a settle is one full
    collection of the unfrozen heap."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
