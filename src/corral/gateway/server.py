"""The gateway's aiohttp application: `/s/<service>/<path>` proxied (HTTP or WebSocket) after the credential
check, `/metrics` (Prometheus) and `/healthz`. Built, then `start()`ed: it starts its endpoint source and
load reporter as tasks of its own and stops them in `stop()`."""
from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from corral.gateway.auth import Authenticator, AuthRefused
from corral.gateway.browser import credential_from, login_redirect
from corral.gateway.load import LoadReporter, LoadSink
from corral.gateway.metrics import GatewayMetrics
from corral.gateway.proxy import Forwarder, upstream_headers
from corral.gateway.routes import RouteTable
from corral.gateway.sources import EndpointSource
from corral.gateway.websocket import is_websocket, proxy_websocket

PREFIX = "/s/"
UPSTREAM_KEEPALIVE_S = 4.0


class Gateway:
    def __init__(self, source: EndpointSource, authenticator: Authenticator | None, *,
                 load_sink: LoadSink | None = None, report_every_s: float = 5.0,
                 metrics: GatewayMetrics | None = None, hold_s: float = 0.0) -> None:
        """`authenticator` None: every service is served without a credential (tests, the benchmark).
        `hold_s`: how long a request waits for a service without a ready replica to get one."""
        self.table = RouteTable()
        self.metrics = metrics or GatewayMetrics()
        self._source = source
        self._auth = authenticator
        self._load = LoadReporter(self.table, load_sink, every_s=report_every_s) if load_sink else None
        self._hold_s = hold_s
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._forwarder: Forwarder | None = None
        self.port: int | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve on host:port (0: a free port); returns the port."""
        # Idle connections to replicas are closed after 4 s, before the usual app servers close theirs
        # (uvicorn: 5 s): a POST is never sent on a connection the replica is closing (it cannot be retried).
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=UPSTREAM_KEEPALIVE_S)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False, trust_env=False,
                                              cookie_jar=aiohttp.DummyCookieJar())
        self._forwarder = Forwarder(self.table, self._session, self.metrics, hold_s=self._hold_s,
                                    on_hold=self._load.demand if self._load is not None else None)
        app = web.Application(handler_args={"max_field_size": 16384})
        app.router.add_get("/metrics", self._metrics_page)
        app.router.add_get("/healthz", self._health)
        app.router.add_route("*", "/s/{service}", self._proxy)
        app.router.add_route("*", "/s/{service}/{tail:.*}", self._proxy)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True)
        await site.start()
        self.port = int(self._runner.addresses[0][1])  # the bound port, for port 0
        self._tasks.append(asyncio.create_task(self._source.run(self.table), name="gateway-endpoints"))
        if self._load is not None:
            self._tasks.append(asyncio.create_task(self._load.run(), name="gateway-load"))
        return self.port

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"services": len(self.table.names())})

    async def _metrics_page(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        service = request.match_info["service"]
        route = self.table.route(service)
        if route is None:
            await self._source.look_up(self.table, service)
            route = self.table.route(service)
        if route is None:
            return web.json_response({"detail": f"no service named {service!r}"}, status=404)
        prefix = PREFIX + request.raw_path[len(PREFIX):].split("/", 1)[0].split("?", 1)[0]
        user = None
        if not route.public and self._auth is not None:
            login = login_redirect(request, prefix)
            if login is not None:
                return login
            try:
                user = await self._auth.authenticate(credential_from(request))
            except AuthRefused as refused:
                if refused.status == 503:
                    self.metrics.errors.labels(service, "auth_unavailable").inc()
                return _auth_refusal(refused)
            if route.owner and user != route.owner:
                self.metrics.errors.labels(service, "not_owner").inc()
                return web.json_response({"detail": f"{service} is {route.owner}'s session: only {route.owner} "
                                                    f"may open it, not {user}"}, status=403)
        path_and_query = request.raw_path if route.keep_prefix else request.raw_path[len(prefix):]
        if not path_and_query.startswith("/"):
            path_and_query = "/" + path_and_query
        headers = upstream_headers(request, user, prefix)
        if route.upstream_authorization:
            headers["Authorization"] = route.upstream_authorization
        if self._load is not None:
            self._load.request_started(service)
        return await self._served(request, service, path_and_query, headers)

    async def _served(self, request: web.Request, service: str, path_and_query: str,
                      headers: CIMultiDict[str]) -> web.StreamResponse:
        assert self._forwarder is not None and self._session is not None
        start = time.perf_counter()
        inflight = self.metrics.inflight.labels(service)
        inflight.inc()
        code = "000"  # the client left before an answer
        try:
            if is_websocket(request):
                response = await proxy_websocket(request, self.table, self._session, self.metrics, service,
                                                 path_and_query, headers)
            else:
                response = await self._forwarder.forward(request, service, path_and_query, headers)
            code = str(response.status)
            return response
        finally:
            inflight.dec()
            self.metrics.requests.labels(service, code).inc()
            self.metrics.latency.labels(service).observe(time.perf_counter() - start)


def _auth_refusal(refused: AuthRefused) -> web.Response:
    response = web.json_response({"detail": refused.detail}, status=refused.status)
    if refused.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="corral"'
    return response
