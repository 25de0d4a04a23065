"""Store writes that never keep the event loop waiting, and what the controller knows while writing fails.

A write that would wait (SQLite's lock held by another process: its busy wait lasts seconds; any write to
PostgreSQL), the write checks and the engine rebuilds after a failure run in one thread, in the order they
were asked for: a rebuild queued after a write reads what that write left, even if whoever awaited the
write went away. The event loop meanwhile keeps answering reads and health checks.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from corral.store import Store, StoreError
from corral.store.store import Changes

R = TypeVar("R")

# Backoff between write checks while the store fails: the first check is at once (a failure caused by
# one commit's data, or a brief lock, is over by then), then 0.2 s doubling to 5 s.
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0


class StoreUnavailable(Exception):
    """The store cannot be written: the request changed nothing and may be retried later (HTTP 503)."""


@dataclass
class Outage:
    reason: str
    since: float

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"store: cannot write to the database since {when}: {self.reason}"


class StoreWriter:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.outage: Outage | None = None
        self._failures = 0  # failed writes and rebuilds since the last successful commit
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="corral-store")

    async def call(self, function: Callable[..., R], *args: Any) -> R:
        return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)

    async def write(self, changes: Changes) -> None:
        # On the loop when that needs no waiting (SQLite with its lock free: ~0.1 ms, less than the hop to
        # a thread and back costs on a busy machine); otherwise in the writer thread.
        if not self.store.try_write(changes):
            await self.call(self.store.write, changes)
        self._failures = 0

    def failed(self, exc: BaseException, now: float) -> Outage:
        """Record a failed write, check or rebuild; the outage starts with the first one."""
        self._failures += 1
        reason = str(exc) if isinstance(exc, StoreError) else f"{type(exc).__name__}: {exc}"
        if self.outage is None:
            self.outage = Outage(reason, now)
        else:
            self.outage.reason = reason
        return self.outage

    def retry_delay_s(self) -> float:
        if self._failures <= 1:
            return 0.0
        return min(RETRY_FIRST_S * 2 ** (self._failures - 2), RETRY_MAX_S)

    def close(self) -> None:
        self._thread.shutdown(wait=True)
