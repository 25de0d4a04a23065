"""How long the controller itself could not listen: the event loop's lateness in waking up.

A SIGSTOP, a VM migration, swap or a handler that blocks the loop all look the same from inside: a
sleep that should have ended at T ends at T + stall. Agents could not reach the controller during the
stall, so the engine must not count it as their silence (see `Engine.discount_stall`). Waits are cut
into short probes so that a stall is measured whole even when it falls inside a long wait.
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

    async def wait(self, event: asyncio.Event, timeout_s: float | None) -> float:
        """Wait for `event` or `timeout_s` (None: no limit); return the stall seen meanwhile (seconds)."""
        stall = 0.0
        end = None if timeout_s is None else self.monotonic() + timeout_s
        while not event.is_set():
            start = self.monotonic()
            chunk = self.probe_s if end is None else min(self.probe_s, end - start)
            if chunk <= 0:
                break
            try:
                await asyncio.wait_for(event.wait(), timeout=chunk)
            except TimeoutError:
                pass
            late = self.monotonic() - start - chunk
            if late > self.threshold_s:
                stall += late
        return stall

    async def sleep(self, seconds: float) -> float:
        """Sleep; return the stall seen meanwhile."""
        return await self.wait(asyncio.Event(), seconds)
