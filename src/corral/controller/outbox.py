"""Per-node queues of commands for agents, delivered by long poll and acknowledged by sequence number."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from corral.protocol import Command


@dataclass
class _Queue:
    items: list[Command] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class Outbox:
    def __init__(self) -> None:
        self._queues: dict[str, _Queue] = {}
        self._seq = 0

    def _queue(self, node: str) -> _Queue:
        return self._queues.setdefault(node, _Queue())

    def put(self, node: str, command: Command) -> None:
        self._seq += 1
        command.seq = self._seq
        q = self._queue(node)
        q.items.append(command)
        q.wake.set()

    def ack(self, node: str, after: int) -> None:
        q = self._queue(node)
        q.items = [c for c in q.items if c.seq > after]

    async def wait(self, node: str, after: int, wait_s: float) -> list[Command]:
        """Commands newer than `after`, waiting up to `wait_s` for one to arrive."""
        self.ack(node, after)
        q = self._queue(node)
        if not q.items:
            q.wake.clear()
            try:
                await asyncio.wait_for(q.wake.wait(), timeout=wait_s)
            except TimeoutError:
                return []
        return list(q.items)

    def pending_count(self, node: str) -> int:
        return len(self._queue(node).items)
