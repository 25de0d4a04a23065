"""The route table: each service's ready endpoints, as the last update from an `EndpointSource` gave them, and
the requests in flight to each endpoint.

Least in-flight: a request goes to the endpoint with the fewest requests in flight from this gateway; among
equals, the one after the previous pick (so an idle service is served round-robin). An endpoint that failed
a connection is passed over for `EJECT_S` (a dead replica answers nothing, so it would look the least busy
and take every other request until the controller removes it), unless every endpoint has failed. An endpoint that leaves
the set (removed or draining) gets no new request; requests already on it hold their own lease and finish.
Single-threaded (the gateway's event loop): no locks."""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

EJECT_S = 2.0


@dataclass(frozen=True, slots=True)
class Endpoint:
    address: str  # "host:port"
    replica: int | None = None  # the replica's index, for messages


@dataclass(frozen=True, slots=True)
class ServiceRoute:
    """What an `EndpointSource` publishes for one service: its ready, non-draining endpoints."""

    name: str
    endpoints: tuple[Endpoint, ...]
    public: bool = False  # no credential asked (the spec's `public`)
    version: int = 0  # the source's version of this set (the controller's long-poll version)
    owner: str = ""  # only this user may open it (a notebook session); "": any user of the cluster
    # The application serves under /s/<name>/ itself (JupyterLab's base_url): the path goes on whole, not
    # stripped of its prefix, so the pages' own links and WebSocket URLs point back through the gateway.
    keep_prefix: bool = False
    # The Authorization header the application expects from the gateway (a session's JupyterLab token): it
    # replaces the client's, so the application's port refuses anyone who goes around the gateway.
    upstream_authorization: str = ""


@dataclass(slots=True)
class _Entry:
    route: ServiceRoute
    inflight: dict[str, int] = field(default_factory=dict)  # address -> requests in flight
    turn: int = 0  # where the next tie-break starts


class RouteTable:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._ejected: dict[str, float] = {}  # address -> until when it is passed over
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}  # service -> requests held for an endpoint

    def publish(self, route: ServiceRoute) -> None:
        """The service's endpoints are now `route.endpoints`; in-flight counts of endpoints that stay are kept,
        those of removed endpoints live on until their requests finish."""
        entry = self._entries.get(route.name)
        if entry is None:
            self._entries[route.name] = _Entry(route)
        else:
            entry.route = route
        if route.endpoints:
            for waiter in self._waiting.pop(route.name, []):
                if not waiter.done():
                    waiter.set_result(None)

    async def wait_ready(self, name: str, timeout_s: float) -> bool:
        """Waits up to `timeout_s` for the service to have an endpoint (a replica starting, a service scaled
        to zero coming back); whether it has one."""
        entry = self._entries.get(name)
        if entry is not None and entry.route.endpoints:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(name, []).append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            waiters = self._waiting.get(name)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiting[name]

    def forget(self, name: str) -> None:
        """The service is gone: no new request reaches it (in-flight ones finish on their own leases)."""
        self._entries.pop(name, None)

    def route(self, name: str) -> ServiceRoute | None:
        entry = self._entries.get(name)
        return entry.route if entry else None

    def names(self) -> list[str]:
        return list(self._entries)

    def inflight(self, name: str) -> int:
        """Requests on the service's endpoints, and those held waiting for one (demand, to the autoscaler)."""
        entry = self._entries.get(name)
        return (sum(entry.inflight.values()) if entry else 0) + len(self._waiting.get(name, ()))

    def pick(self, name: str, exclude: frozenset[str] | set[str] = frozenset()) -> Endpoint | None:
        """The endpoint with the fewest requests in flight, skipping `exclude` (addresses already tried)."""
        entry = self._entries.get(name)
        if entry is None:
            return None
        untried = [e for e in entry.route.endpoints if e.address not in exclude]
        now = self._clock()
        candidates = [e for e in untried if self._ejected.get(e.address, 0.0) <= now] or untried
        if not candidates:
            return None
        start = entry.turn % len(candidates)
        rotated = candidates[start:] + candidates[:start]
        best = min(rotated, key=lambda e: entry.inflight.get(e.address, 0))
        entry.turn = candidates.index(best) + 1
        return best

    def failed(self, endpoint: Endpoint) -> None:
        """A connection to `endpoint` failed: pass it over for EJECT_S."""
        now = self._clock()
        self._ejected = {a: until for a, until in self._ejected.items() if until > now}
        self._ejected[endpoint.address] = now + EJECT_S

    @contextlib.contextmanager
    def lease(self, name: str, endpoint: Endpoint) -> Iterator[None]:
        """Counts a request in flight to `endpoint` while the block runs."""
        entry = self._entries.get(name)
        if entry is None:  # forgotten between pick and lease: nothing to count against
            yield
            return
        entry.inflight[endpoint.address] = entry.inflight.get(endpoint.address, 0) + 1
        try:
            yield
        finally:
            left = entry.inflight.get(endpoint.address, 1) - 1
            if left > 0:
                entry.inflight[endpoint.address] = left
            else:
                entry.inflight.pop(endpoint.address, None)
