"""`corral gateway`: the gateway as a process of its own, on the controller's services API, until SIGTERM or
SIGINT (then it stops taking connections and closes)."""
from __future__ import annotations

import asyncio
import logging
import signal
import ssl
from dataclasses import dataclass

import aiohttp

from corral.gateway.auth import Authenticator
from corral.gateway.controller import ControllerClient
from corral.gateway.controller_source import ControllerSource
from corral.gateway.load import ControllerLoadSink
from corral.gateway.metrics import GatewayMetrics
from corral.gateway.server import Gateway

log = logging.getLogger("corral.gateway")


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    controller_urls: tuple[str, ...]
    credential: str  # the gateway's own: reads the services, posts their load
    host: str = "127.0.0.1"
    port: int = 6820
    ca_file: str | None = None
    auth_cache_s: float = 5.0
    auth_stale_s: float = 60.0
    report_every_s: float = 5.0
    list_every_s: float = 5.0
    hold_s: float = 10.0


async def serve(settings: GatewaySettings) -> None:
    context = ssl.create_default_context(cafile=settings.ca_file) if settings.ca_file else None
    async with aiohttp.ClientSession(trust_env=False) as session:
        controller = ControllerClient(settings.controller_urls, settings.credential, session, context)
        metrics = GatewayMetrics()
        source = ControllerSource(controller, metrics, list_every_s=settings.list_every_s)
        auth = Authenticator(controller, ttl_s=settings.auth_cache_s, stale_s=settings.auth_stale_s)
        gateway = Gateway(source, auth, load_sink=ControllerLoadSink(controller),
                          report_every_s=settings.report_every_s, metrics=metrics, hold_s=settings.hold_s)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        port = await gateway.start(settings.host, settings.port)
        log.warning("corral gateway on http://%s:%d/s/<service>/ for %s", settings.host, port,
                    ", ".join(settings.controller_urls))
        try:
            await stop.wait()
        finally:
            await gateway.stop()
