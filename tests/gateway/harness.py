"""Real pieces for the gateway's tests: replicas as their own processes (tests/gateway/backend.py) and the
gateway served from an event loop in a thread, on loopback."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp

from corral.gateway.auth import Authenticator
from corral.gateway.controller import ControllerClient
from corral.gateway.routes import Endpoint, ServiceRoute
from corral.gateway.server import Gateway
from corral.gateway.sources import StaticSource

ROOT = Path(__file__).resolve().parents[2]


class Backend:
    """One replica process; `kill()` SIGKILLs it (a crash: its connections are reset by the kernel)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.process = subprocess.Popen([sys.executable, "-m", "tests.gateway.backend", "--name", name],
                                        cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                        env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip():
            self.process.kill()
            raise RuntimeError(f"backend {name} did not start (exit {self.process.wait()})")
        self.port = int(line)
        self.address = f"127.0.0.1:{self.port}"
        self.endpoint = Endpoint(self.address)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()


def route(name: str, *backends: Backend, public: bool = True, version: int = 0) -> ServiceRoute:
    return ServiceRoute(name, tuple(b.endpoint for b in backends), public, version)


class GatewayThread:
    """A Gateway on 127.0.0.1 (a free port), its loop in a thread of its own."""

    def __init__(self, build: Callable[[], Gateway]) -> None:
        self._build = build
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.gateway: Gateway | None = None
        self.url = ""
        self.sessions: list[aiohttp.ClientSession] = []  # closed after the gateway stops

    def call(self, coroutine: Coroutine[Any, Any, Any], timeout_s: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=timeout_s)

    def __enter__(self) -> GatewayThread:
        self._thread.start()

        async def start() -> Gateway:
            gateway = self._build()
            await gateway.start("127.0.0.1", 0)
            return gateway

        self.gateway = self.call(start())
        self.url = f"http://127.0.0.1:{self.gateway.port}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.gateway is not None:
            self.call(self.gateway.stop())
        for session in self.sessions:
            self.call(session.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


def static_gateway(*routes: ServiceRoute, hold_s: float = 0.0) -> tuple[GatewayThread, StaticSource]:
    source = StaticSource(*routes)
    return GatewayThread(lambda: Gateway(source, None, hold_s=hold_s)), source


def authenticating_gateway(source: StaticSource, controller_url: str, credential: str, *, ttl_s: float,
                           stale_s: float) -> GatewayThread:
    """A gateway whose credentials are checked by the controller at `controller_url`."""
    def build() -> Gateway:
        session = aiohttp.ClientSession()
        thread.sessions.append(session)
        client = ControllerClient([controller_url], credential, session)
        return Gateway(source, Authenticator(client, ttl_s=ttl_s, stale_s=stale_s))

    thread = GatewayThread(build)
    return thread
