"""How long the controller itself could not listen: the event loop's lateness in waking up.

A SIGSTOP, a VM migration, swap or a handler that blocks the loop all look the same from inside: a
sleep that should have ended at T ends at T + stall. Agents could not reach the controller during the
stall, so the engine must not count it as their silence (see `Engine.discount_stall`).

A probe task of its own sleeps `probe_s` at a time and counts how late it wakes, wherever the stall fell
(in a wait, in a scheduling cycle, in a request's handler). The scheduling loop takes the stall seen so
far before every cycle (`take`), the part the probe has not had its turn to see yet included: the loop
may run before the probe after a resume, and its cycle must not declare nodes down for the controller's
own absence (decision 0017). A stall is counted short by up to `probe_s` (the probe's own sleep), never
long.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class StallWatch:
    def __init__(self, probe_s: float = 1.0, threshold_s: float = 0.5,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.probe_s = probe_s
        self.threshold_s = threshold_s
        self.monotonic = monotonic
        self._heard = monotonic()  # when the loop last ran on time (or a stall was counted up to)
        self._stall = 0.0  # counted, not yet taken

    async def probe(self) -> None:
        """Run for the controller's life (a task of its own)."""
        self._heard = self.monotonic()
        while True:
            await asyncio.sleep(self.probe_s)
            self._note(self.monotonic())

    def take(self) -> float:
        """The stall seen since the last take (seconds), including one the probe has not seen yet."""
        now = self.monotonic()
        if now - self._heard - self.probe_s > self.threshold_s:
            self._note(now)
        stall, self._stall = self._stall, 0.0
        return stall

    def _note(self, now: float) -> None:
        late = now - self._heard - self.probe_s
        if late > self.threshold_s:
            self._stall += late
        self._heard = now
