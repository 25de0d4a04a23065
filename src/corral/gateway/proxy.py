"""Forwarding one HTTP request to a replica and its response back, streamed both ways (chunked bodies and
server-sent events pass chunk by chunk as they arrive: nothing is buffered, nothing is compressed).

Retries, each replica tried once: a request whose connection to a replica could not be made (refused, timed
out connecting) never reached the application and no byte of its body was read, so it goes to another
replica whatever its method. This is the common failure while a replica is being replaced or has just died:
the gateway learns of it a moment after it stopped listening. A request whose connection was reset or closed
before a response began may have reached the application: it goes to another replica only when its method is
idempotent (GET, HEAD, OPTIONS, PUT, DELETE) and it has no body (so no byte of one was consumed). A response that
has begun cannot be retried: if its replica dies mid-stream, the client's connection is cut (its response
is visibly incomplete) and the error counted."""
from __future__ import annotations

import logging
from collections.abc import Callable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from corral.gateway.browser import strip_cookie
from corral.gateway.metrics import GatewayMetrics
from corral.gateway.routes import Endpoint, RouteTable

log = logging.getLogger("corral.gateway")

# Raised before a connection to the replica existed: nothing of the request was sent or read.
NEVER_CONNECTED = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
# Hop-by-hop headers (RFC 9110 7.6.1) and those the gateway sets itself.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                        "upgrade", "proxy-authenticate", "proxy-authorization", "host", "expect"})
USER_HEADER = "X-Corral-User"  # the authenticated user, for the application; a client's own is dropped
CONNECT_TIMEOUT_S = 5.0
WHOLE_BODY_MAX = 64 * 1024  # bytes: a response of known length up to this is relayed in one write


def upstream_headers(request: web.Request, user: str | None, prefix: str) -> CIMultiDict[str]:
    named = {h.strip().lower() for h in request.headers.get("Connection", "").split(",")}
    headers: CIMultiDict[str] = CIMultiDict()
    for key, value in request.headers.items():
        lower = key.lower()
        if lower in HOP_BY_HOP or lower in named or lower == USER_HEADER.lower():
            continue
        if lower == "authorization" and user is not None:
            continue  # the cluster credential stays with the gateway: the application never sees it
        if lower == "cookie" and user is not None:
            value = strip_cookie(value)  # a browser's credential (gateway/browser.py) stays here too
            if not value:
                continue
        headers.add(key, value)
    peer = request.remote or ""
    forwarded_for = request.headers.get("X-Forwarded-For")
    headers["X-Forwarded-For"] = f"{forwarded_for}, {peer}" if forwarded_for else peer
    headers["X-Forwarded-Proto"] = request.scheme
    headers["X-Forwarded-Host"] = request.host
    headers["X-Forwarded-Prefix"] = prefix
    if user is not None:
        headers[USER_HEADER] = user
    return headers


def upstream_url(endpoint: Endpoint, path_and_query: str) -> URL:
    return URL(f"http://{endpoint.address}{path_and_query}", encoded=True)


class Forwarder:
    def __init__(self, table: RouteTable, session: aiohttp.ClientSession, metrics: GatewayMetrics, *,
                 hold_s: float = 0.0, on_hold: Callable[[str], None] | None = None) -> None:
        """`hold_s`: how long a request to a service without a ready replica waits for one before its 503
        (`on_hold(service)` is told at once: the autoscaler must learn of the demand)."""
        self._table = table
        self._session = session
        self._metrics = metrics
        self._hold_s = hold_s
        self._on_hold = on_hold

    async def forward(self, request: web.Request, service: str, path_and_query: str,
                      headers: CIMultiDict[str]) -> web.StreamResponse:
        retryable = request.method in IDEMPOTENT and not request.body_exists
        tried: set[str] = set()
        failures: list[str] = []
        held = False
        while True:
            endpoint = self._table.pick(service, tried)
            if endpoint is None and not tried and not held and self._hold_s > 0:
                held = True
                if self._on_hold is not None:
                    self._on_hold(service)
                if await self._table.wait_ready(service, self._hold_s):
                    continue
            if endpoint is None:
                return self._unavailable(service, failures)
            tried.add(endpoint.address)
            with self._table.lease(service, endpoint):
                try:
                    upstream = await self._session.request(
                        request.method, upstream_url(endpoint, path_and_query), headers=headers,
                        data=request.content.iter_any() if request.body_exists else None,
                        allow_redirects=False, auto_decompress=False,
                        timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S))
                except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                    failures.append(f"{endpoint.address}: {exc or type(exc).__name__}")
                    self._table.failed(endpoint)
                    if retryable or isinstance(exc, NEVER_CONNECTED):
                        self._metrics.retries.labels(service).inc()
                        continue
                    self._metrics.errors.labels(service, "replica_failed").inc()
                    why = "has a body" if request.method in IDEMPOTENT else "is not idempotent"
                    return _refusal(502, f"service {service}: replica {endpoint.address} failed before answering "
                                         f"({failures[-1]}); not retried: this {request.method} {why}, so it "
                                         "is not safe to send twice")
                async with upstream:
                    return await self._relay(request, upstream, service)

    def _unavailable(self, service: str, failures: list[str]) -> web.Response:
        if failures:
            self._metrics.errors.labels(service, "all_replicas_failed").inc()
            return _refusal(502, f"service {service}: every ready replica failed: {'; '.join(failures)}")
        self._metrics.errors.labels(service, "no_ready_replica").inc()
        response = _refusal(503, f"service {service} has no ready replica" +
                            (f" (waited {self._hold_s:g} s)" if self._hold_s > 0 else ""))
        response.headers["Retry-After"] = "1"
        return response

    async def _relay(self, request: web.Request, upstream: aiohttp.ClientResponse,
                     service: str) -> web.StreamResponse:
        length = upstream.content_length if "transfer-encoding" not in upstream.headers else None
        if length is not None and length <= WHOLE_BODY_MAX and request.method != "HEAD":
            # A small body of known length goes out with its headers in one write (half the system calls
            # of streaming it); it cannot be a stream that a client waits on piece by piece.
            try:
                body = await upstream.read()
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
                self._metrics.errors.labels(service, "replica_lost_mid_response").inc()
                return _refusal(502, f"service {service}: the replica failed mid-response: {exc}")
            whole = web.Response(status=upstream.status, reason=upstream.reason, body=body)
            _copy_headers(upstream, whole)
            return whole
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        _copy_headers(upstream, response)
        if length is not None:
            response.content_length = length
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            if request.transport is None or request.transport.is_closing():
                raise  # the client left: nothing to tell it
            self._metrics.errors.labels(service, "replica_lost_mid_response").inc()
            log.warning("service %s: replica lost mid-response: %s", service, exc)
            request.transport.close()  # the client sees a cut response, never a complete-looking one
            return response
        await response.write_eof()
        return response


def _copy_headers(upstream: aiohttp.ClientResponse, response: web.StreamResponse) -> None:
    named = {h.strip().lower() for h in upstream.headers.get("Connection", "").split(",")}
    for key, value in upstream.headers.items():
        lower = key.lower()
        if lower not in HOP_BY_HOP and lower not in named and lower != "content-length":
            response.headers.add(key, value)


def _refusal(status: int, detail: str) -> web.Response:
    return web.json_response({"detail": detail}, status=status)
