"""The pacer's decisions (corral.engine.pacer): when a wanted cycle runs, and which timer the loop keeps."""
from __future__ import annotations

import pytest

from corral.engine.pacer import LIVE_MIN_INTERVAL_S as LIVE_MIN_S
from corral.engine.pacer import CyclePacer

LIVE, SIMULATED, SIMULATED_5S = CyclePacer.live, CyclePacer.simulated, lambda: CyclePacer.simulated(5.0)

# (case, pacer, cycles that ran as (started, ended), a cycle wanted at, when it runs)
NEXT_CYCLE = [
    ("live: no cycle yet runs at once", LIVE, [], 10.0, 10.0),
    ("live: requests get as long as the cycle took", LIVE, [(10.0, 10.5)], 10.5, 11.0),
    ("live: ... at most 1 s", LIVE, [(10.0, 12.5)], 12.5, 13.5),
    ("live: wanted after the requests' turn runs at once", LIVE, [(10.0, 10.5)], 11.25, 11.25),
    ("live: only the last cycle holds", LIVE, [(10.0, 13.0), (20.0, 20.25)], 20.25, 20.5),
    ("live: within the minimum interval waits for its end", LIVE, [(10.0, 10.01)], 10.0 + LIVE_MIN_S / 2,
     10.0 + LIVE_MIN_S),
    ("live: a cycle wanted after the interval runs at once", LIVE, [(10.0, 10.01)], 10.5, 10.5),
    ("simulated: no hold by default", SIMULATED, [(100.0, 100.0)], 100.0, 100.0),
    ("simulated: within the minimum interval waits for its end", SIMULATED_5S, [(100.0, 100.0)], 103.0, 105.0),
    ("simulated: at the interval's end runs", SIMULATED_5S, [(100.0, 100.0)], 105.0, 105.0),
    ("simulated: after it runs at once", SIMULATED_5S, [(100.0, 100.0)], 106.0, 106.0),
    ("simulated: the interval counts from the last start", SIMULATED_5S, [(100.0, 100.0), (104.0, 104.0)],
     106.0, 109.0),
]


@pytest.mark.parametrize("pacer, cycles, wanted, runs", [row[1:] for row in NEXT_CYCLE],
                         ids=[row[0] for row in NEXT_CYCLE])
def test_when_a_wanted_cycle_runs(pacer, cycles, wanted: float, runs: float) -> None:
    p = pacer()
    for started, ended in cycles:
        p.cycle_ran(started, ended)
    assert p.next_cycle(wanted) == runs


# (case, pacer, the loop sleeps at, the engine's next deadline, the timer it keeps)
SLEEP = [
    ("live: no deadline, no timer", LIVE, 50.0, None, None),
    ("live: a future deadline", LIVE, 50.0, 60.0, 60.0),
    ("live: a deadline passed during the requests' turn rings at once", LIVE, 50.0, 40.0, 50.0),
    ("live: a deadline due now rings now", LIVE, 50.0, 50.0, 50.0),
    ("simulated: no deadline, no timer", SIMULATED, 50.0, None, None),
    ("simulated: a future deadline", SIMULATED, 50.0, 60.0, 60.0),
    ("simulated: a deadline at the cycle's instant is dropped", SIMULATED, 50.0, 50.0, None),
    ("simulated: a past deadline is dropped", SIMULATED, 50.0, 40.0, None),
]


@pytest.mark.parametrize("pacer, now, deadline, timer", [row[1:] for row in SLEEP], ids=[row[0] for row in SLEEP])
def test_the_timer_the_loop_sleeps_with(pacer, now: float, deadline: float | None, timer: float | None) -> None:
    p = pacer()
    assert p.sleep(now, deadline) == timer
    assert p.timer == timer


@pytest.mark.parametrize("pacer", [LIVE, SIMULATED], ids=["live", "simulated"])
def test_the_loop_keeps_one_timer(pacer) -> None:
    p = pacer()
    p.sleep(50.0, 60.0)
    assert p.rings(60.0)
    p.cycle_ran(55.0, 55.0)  # woken sooner: the timer is dropped
    assert not p.rings(60.0)
    p.sleep(55.0, 80.0)
    assert not p.rings(60.0) and p.rings(80.0)
