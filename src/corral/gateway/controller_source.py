"""Endpoints from the controller: `GET /api/v1/services` (which services exist) every `list_every_s`, and per
service `GET /api/v1/services/{name}/endpoints?after=V`, a long poll that answers when the set's version
passes V (or after the controller's own wait, with the same version).

The endpoints reply (the wire contract with the controller, docs/decisions/0018-service-gateway.md):
`{"service": NAME, "version": V, "public": BOOL, "owner": USER, "keep_prefix": BOOL, "endpoints":
[{"replica": I, "job_id": J, "ports": {PORT_NAME: "host:port", ...}, "draining": BOOL}, ...]}` listing ready
replicas (`owner` and `keep_prefix` may be left out: "" and false). The gateway routes to each replica's first
port (the spec's first, the one its processes get as `PORT`) and skips draining ones; only `owner` may pass
when one is named; with `keep_prefix` the path goes on with its /s/NAME prefix.

While no controller answers, the table keeps what it last had: the service goes on being served by the
replicas known to be ready (the controller failing over must not interrupt it)."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import quote

from corral.gateway.controller import ControllerClient, ControllerUnreachable
from corral.gateway.metrics import GatewayMetrics
from corral.gateway.routes import Endpoint, RouteTable, ServiceRoute

# A request for a service the gateway does not know lists the services at once, but at most this often;
# a service found gets this long for its endpoints' first answer before the request goes on.
LOOK_UP_EVERY_S = 1.0
LOOK_UP_WAIT_S = 2.0

log = logging.getLogger("corral.gateway")


class EndpointsMalformed(ValueError):
    pass


def parse_endpoints(name: str, body: Any) -> ServiceRoute:
    """The controller's endpoints reply as a route; a reply of another shape is refused, naming what is wrong."""
    if not isinstance(body, dict):
        raise EndpointsMalformed(f"service {name}: the endpoints reply is not a JSON object")
    version, public, items = body.get("version"), body.get("public", False), body.get("endpoints")
    owner, keep_prefix = body.get("owner") or "", body.get("keep_prefix", False)
    if not isinstance(owner, str):
        raise EndpointsMalformed(f"service {name}: 'owner' is {owner!r}, not a user name")
    upstream = body.get("upstream_authorization") or ""
    if not isinstance(upstream, str):
        raise EndpointsMalformed(f"service {name}: 'upstream_authorization' is not a string")
    if not isinstance(keep_prefix, bool):
        raise EndpointsMalformed(f"service {name}: 'keep_prefix' is {keep_prefix!r}, not true or false")
    if not isinstance(version, int) or isinstance(version, bool):
        raise EndpointsMalformed(f"service {name}: 'version' is {version!r}, not an integer")
    if not isinstance(public, bool):
        raise EndpointsMalformed(f"service {name}: 'public' is {public!r}, not true or false")
    if not isinstance(items, list):
        raise EndpointsMalformed(f"service {name}: 'endpoints' is {items!r}, not a list")
    endpoints = []
    for item in items:
        ports = item.get("ports") if isinstance(item, dict) else None
        if not isinstance(ports, dict) or not ports or not all(isinstance(a, str) for a in ports.values()):
            raise EndpointsMalformed(f"service {name}: endpoint {item!r} has no 'ports' of name -> \"host:port\"")
        if item.get("draining", False):
            continue
        replica = item.get("replica")
        endpoints.append(Endpoint(next(iter(ports.values())), replica if isinstance(replica, int) else None))
    return ServiceRoute(name, tuple(endpoints), public, version, owner, keep_prefix, upstream)


class ControllerSource:
    def __init__(self, client: ControllerClient, metrics: GatewayMetrics, *, list_every_s: float = 5.0,
                 poll_timeout_s: float = 70.0, retry_s: float = 1.0) -> None:
        self._client = client
        self._metrics = metrics
        self._list_every_s = list_every_s
        self._poll_timeout_s = poll_timeout_s  # longer than the controller's own long-poll wait
        self._retry_s = retry_s
        self._unchanged_pause_s = min(retry_s, 0.5)
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._said: str | None = None  # the listing's problem last logged: each is logged once, not every round
        self._looked_up_at = -LOOK_UP_EVERY_S  # when a request for an unknown service last listed the services

    def _problem(self, message: str) -> None:
        self._metrics.controller_up.set(0)
        kind = message.split(":", 1)[0]
        if self._said != kind:
            log.warning("%s", message)
            self._said = kind

    async def run(self, table: RouteTable) -> None:
        try:
            while True:
                await self._list_once(table)
                await asyncio.sleep(self._list_every_s)
        finally:
            for task in self._watchers.values():
                task.cancel()
            await asyncio.gather(*self._watchers.values(), return_exceptions=True)

    async def _list_once(self, table: RouteTable) -> None:
        try:
            reply = await self._client.request("GET", "/services")
        except ControllerUnreachable as exc:
            self._problem(f"controller unreachable, serving the last known endpoints: {exc}")
            return
        if reply.status != 200 or not isinstance(reply.body, list):
            self._problem(f"GET /api/v1/services answered {reply.status}: {reply.detail()}; "
                          "serving the last known endpoints")
            return
        if self._said is not None:
            log.warning("the controller answers again")
            self._said = None
        self._metrics.controller_up.set(1)
        names = {item["name"] for item in reply.body if isinstance(item, dict) and isinstance(item.get("name"), str)}
        for name in names - self._watchers.keys():
            self._watchers[name] = asyncio.create_task(self._watch(name, table), name=f"gateway-watch-{name}")
        for name in self._watchers.keys() - names:
            self._watchers.pop(name).cancel()
            self._forget(table, name)

    async def look_up(self, table: RouteTable, name: str) -> None:
        """List the services now (at most once per LOOK_UP_EVERY_S, whatever names requests make up), and give
        a service found the first answer of its endpoints, up to LOOK_UP_WAIT_S."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._looked_up_at >= LOOK_UP_EVERY_S:
            self._looked_up_at = loop.time()
            await self._list_once(table)
        if name not in self._watchers:
            return
        deadline = loop.time() + LOOK_UP_WAIT_S
        while table.route(name) is None and loop.time() < deadline:
            await asyncio.sleep(0.02)

    def _forget(self, table: RouteTable, name: str) -> None:
        table.forget(name)
        with contextlib.suppress(KeyError):  # never published
            self._metrics.ready_endpoints.remove(name)

    async def _watch(self, name: str, table: RouteTable) -> None:
        version: int | None = None
        path = f"/services/{quote(name, safe='')}/endpoints"
        while True:
            params = {"after": str(version)} if version is not None else None
            try:
                reply = await self._client.request("GET", path, params=params, timeout_s=self._poll_timeout_s)
            except ControllerUnreachable:
                self._metrics.controller_up.set(0)
                await asyncio.sleep(self._retry_s)  # the table keeps the last endpoints meanwhile
                continue
            if reply.status == 404:  # deleted: the next listing drops it too
                table.forget(name)
                await asyncio.sleep(self._list_every_s)
                continue
            try:
                if reply.status != 200:
                    raise EndpointsMalformed(f"service {name}: endpoints answered {reply.status}: {reply.detail()}")
                route = parse_endpoints(name, reply.body)
            except EndpointsMalformed as exc:
                log.warning("%s", exc)
                await asyncio.sleep(self._retry_s)
                continue
            self._metrics.controller_up.set(1)
            if route.version == version:  # the controller's wait ran out with no change
                await asyncio.sleep(self._unchanged_pause_s)  # (a controller that never waits is not hammered)
                continue
            table.publish(route)
            self._metrics.ready_endpoints.labels(name).set(len(route.endpoints))
            version = route.version
