"""WebSockets through the gateway: the replica's handshake first (a replica that refuses the connection is
skipped for the next, as an idempotent request would be), then the client's, then messages pumped both ways
until either side closes; the close code passes through. Each side answers its own pings."""
from __future__ import annotations

import asyncio
import contextlib

import aiohttp
from aiohttp import WSMsgType, web
from multidict import CIMultiDict

from corral.gateway.metrics import GatewayMetrics
from corral.gateway.routes import RouteTable

# Headers of the client's handshake that the replica's handshake makes anew.
HANDSHAKE = frozenset({"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
                       "sec-websocket-protocol"})


def is_websocket(request: web.Request) -> bool:
    return (request.method == "GET" and request.headers.get("Upgrade", "").lower() == "websocket"
            and "upgrade" in request.headers.get("Connection", "").lower())


async def proxy_websocket(request: web.Request, table: RouteTable, session: aiohttp.ClientSession,
                          metrics: GatewayMetrics, service: str, path_and_query: str,
                          headers: CIMultiDict[str]) -> web.StreamResponse:
    protocols = tuple(p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip())
    handshake = CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in HANDSHAKE)
    tried: set[str] = set()
    while (endpoint := table.pick(service, tried)) is not None:
        tried.add(endpoint.address)
        with table.lease(service, endpoint):
            try:
                upstream = await session.ws_connect(f"http://{endpoint.address}{path_and_query}",
                                                    protocols=protocols, headers=handshake,
                                                    timeout=aiohttp.ClientWSTimeout(ws_close=10))
            except aiohttp.WSServerHandshakeError as exc:
                return web.json_response({"detail": f"service {service}: the replica refused the WebSocket: "
                                                    f"{exc.status} {exc.message}"}, status=502)
            except (aiohttp.ClientConnectionError, TimeoutError):
                table.failed(endpoint)
                metrics.retries.labels(service).inc()
                continue
            async with upstream:
                client = web.WebSocketResponse(protocols=(upstream.protocol,) if upstream.protocol else ())
                await client.prepare(request)
                await _pump_both(client, upstream)
                return client
    metrics.errors.labels(service, "all_replicas_failed" if tried else "no_ready_replica").inc()
    return web.json_response({"detail": f"service {service} has no replica that takes the WebSocket"},
                             status=502 if tried else 503)


async def _pump_both(client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse) -> None:
    to_upstream = asyncio.create_task(_pump(client, upstream))
    to_client = asyncio.create_task(_pump(upstream, client))
    done, pending = await asyncio.wait({to_upstream, to_client}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for task in done:
        task.result()


async def _pump(source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
                sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse) -> None:
    try:
        async for message in source:
            if message.type == WSMsgType.TEXT:
                await sink.send_str(message.data)
            elif message.type == WSMsgType.BINARY:
                await sink.send_bytes(message.data)
            elif message.type == WSMsgType.ERROR:
                break
    except ConnectionResetError:  # the sink went away: close what remains
        pass
    code = source.close_code if source.close_code is not None else 1000
    await sink.close(code=code)
