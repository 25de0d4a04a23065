"""Per-service load for the autoscaler: every `every_s`, each known service's requests in flight (now) and
requests per second (started over the last interval) go to a `LoadSink`; the controller's is
`POST /api/v1/services/{name}/load {"inflight": N, "rps": R}` (a `ServiceLoadReported` in the engine)."""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol
from urllib.parse import quote

from corral.gateway.controller import ControllerClient, ControllerUnreachable
from corral.gateway.routes import RouteTable

log = logging.getLogger("corral.gateway")


class LoadSink(Protocol):
    async def report(self, service: str, inflight: int, rps: float) -> None: ...


class ControllerLoadSink:
    def __init__(self, controller: ControllerClient) -> None:
        self._controller = controller
        self._said: set[tuple[str, int]] = set()  # (service, status) already logged: say each problem once

    async def report(self, service: str, inflight: int, rps: float) -> None:
        try:
            reply = await self._controller.request("POST", f"/services/{quote(service, safe='')}/load",
                                                   json={"inflight": inflight, "rps": round(rps, 3)})
        except ControllerUnreachable:
            return  # the next report carries the load of then; nothing to catch up
        if reply.status >= 300 and (service, reply.status) not in self._said:
            self._said.add((service, reply.status))
            log.warning("load report for %s refused (%s): %s", service, reply.status, reply.detail())


class LoadReporter:
    def __init__(self, table: RouteTable, sink: LoadSink, *, every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._table = table
        self._sink = sink
        self.every_s = every_s
        self._clock = clock
        self._started: Counter[str] = Counter()
        self._wake = asyncio.Event()

    def request_started(self, service: str) -> None:
        self._started[service] += 1

    def demand(self, service: str) -> None:
        """A request waits for a service without a ready replica: report now, not at the next round."""
        self._wake.set()

    async def run(self) -> None:
        since = self._clock()
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.every_s)
            except TimeoutError:
                pass
            self._wake.clear()
            now = self._clock()
            started, self._started = self._started, Counter()
            elapsed = max(now - since, 1e-9)
            since = now
            await asyncio.gather(*(self._sink.report(name, self._table.inflight(name), started[name] / elapsed)
                                   for name in self._table.names()))
