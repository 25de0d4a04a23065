"""Where the gateway learns each service's endpoints.

An `EndpointSource` runs for the gateway's life and publishes into its `RouteTable`. Two exist:
`ControllerSource` (controller_source.py: the controller's services API, long-polled) and `StaticSource`
(here: fed by its owner, for tests and the benchmark, where backends are started by hand)."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from corral.gateway.routes import RouteTable, ServiceRoute


class EndpointSource(Protocol):
    async def run(self, table: RouteTable) -> None:
        """Publish into `table` until cancelled. Must keep the last published endpoints when its own
        origin is away (never empty the table because it cannot reach it)."""
        ...

    async def look_up(self, table: RouteTable, name: str) -> None:
        """A request names a service the table lacks: publish it now if the origin has it (a service just
        created answers at once, not after the next listing; the gateway answers 404 only for one that
        does not exist)."""
        ...


class StaticSource:
    """Routes set by its owner with `publish`/`forget`, from the gateway's loop or (thread-safe) another thread."""

    def __init__(self, *routes: ServiceRoute) -> None:
        self._initial = routes
        self._table: RouteTable | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self, table: RouteTable) -> None:
        self._table, self._loop = table, asyncio.get_running_loop()
        for route in self._initial:
            table.publish(route)
        await asyncio.Event().wait()  # until cancelled

    async def look_up(self, table: RouteTable, name: str) -> None:
        """Its owner publishes every route: there is nothing more to learn."""

    def publish(self, route: ServiceRoute) -> None:
        self._call(lambda table: table.publish(route))

    def forget(self, name: str) -> None:
        self._call(lambda table: table.forget(name))

    def _call(self, change: Callable[[RouteTable], None]) -> None:
        if self._table is None or self._loop is None:
            raise RuntimeError("the source is not running: start the gateway first")
        table = self._table
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            change(table)
            return
        done = asyncio.run_coroutine_threadsafe(_apply(change, table), self._loop)
        done.result(timeout=10)


async def _apply(change: Callable[[RouteTable], None], table: RouteTable) -> None:
    change(table)
