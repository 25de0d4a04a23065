"""When the scheduling loop runs its next cycle: the one rule that the controller's loop (service.py), the
simulator (sim/driver.py) and the replay test (tests/sim/test_replay_equivalence.py) follow.

A cycle is wanted when something changed that the scheduler looks at (a task's end, a cancel, ...) or
when the loop's timer rings (a submission whose jobs wait their start delay only sets the timer to it).
It runs at once, unless the last cycle holds it back: no cycle starts within `min_interval_s` of the last
one's start, nor before requests had their turn after the last one ended (as long as that cycle took, at
most `requests_turn_max_s`). When the loop goes to sleep it sets its one timer to the engine's next
deadline then, dropping the timer it had (as asyncio.wait_for's timeout is dropped).

The live controller and the simulated loops differ in their parameters, nothing else (`live()` and
`simulated()`). The live loop's minimum interval is the configuration's min_cycle_interval_s (by default
LIVE_MIN_INTERVAL_S); the simulator's is its caller's (none by default: a replay's cycles are where its
events are). Requests take their turn only in real time (a simulated cycle takes no time). And a deadline
that is already past when the loop goes to sleep rings at once in real time (the clock passed it during
the requests' turn, after the cycle that could act on it), while in simulated time, where no time passes
between a cycle and the deadline it leaves, it is dropped: that cycle had its chance at it (a kill with
no grace period is escalated at the next event, not in a second cycle at the same instant).

The caller keeps the times in its own clock. The controller measures its cycles and its requests' turn
on the monotonic clock and its deadlines on its own (possibly fake) clock: the pacer never compares the
one with the other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

# The live loop's minimum interval between cycle starts (Slurm's sched_min_interval). Under a burst (jobs
# submitted one after another, tasks ending), the starts and ends of the last interval go into one cycle,
# one commit and one command poll per agent, instead of a cycle each, a commit each and a poll reply each.
# A quiet cluster loses nothing: a cycle wanted longer than this after the last one began runs at once.
LIVE_MIN_INTERVAL_S = 0.05


@dataclass
class CyclePacer:
    min_interval_s: float = 0.0
    requests_turn_max_s: float = 0.0
    past_deadlines_ring: bool = True
    # When the last cycle started, and when the requests' turn after it ends.
    _last_started: float = field(default=-math.inf, init=False)
    _turn_ends: float = field(default=-math.inf, init=False)
    # The loop's one timer: when it rings (None: it sleeps until something changes).
    timer: float | None = field(default=None, init=False)

    @classmethod
    def live(cls, min_interval_s: float = LIVE_MIN_INTERVAL_S) -> CyclePacer:
        # A cycle over 100,000 jobs takes ~0.5 s: submissions and agent reports are answered in between.
        return cls(min_interval_s=min_interval_s, requests_turn_max_s=1.0, past_deadlines_ring=True)

    @classmethod
    def simulated(cls, min_interval_s: float = 0.0) -> CyclePacer:
        return cls(min_interval_s=min_interval_s, past_deadlines_ring=False)

    def next_cycle(self, now: float) -> float:
        """A cycle is wanted at `now`: when it may run (`now`, or when the last cycle stops holding it)."""
        if now - self._last_started < self.min_interval_s:
            return self._last_started + self.min_interval_s
        return max(now, self._turn_ends)

    def cycle_ran(self, started: float, ended: float) -> None:
        """A cycle ran from `started` to `ended`; the loop's timer was dropped when it began."""
        self._last_started = started
        self._turn_ends = ended + min(ended - started, self.requests_turn_max_s)
        self.timer = None

    def sleep(self, now: float, deadline: float | None) -> float | None:
        """The loop goes to sleep at `now`, the engine's next deadline being `deadline` (None: none). Sets
        and returns the loop's one timer: when it rings (`now` at the earliest), or None for no timer."""
        if deadline is None or (deadline <= now and not self.past_deadlines_ring):
            self.timer = None
        else:
            self.timer = max(now, deadline)
        return self.timer

    def rings(self, at: float) -> bool:
        """Whether a timer set for `at` is still the loop's timer (one dropped since rings no more)."""
        return at == self.timer
