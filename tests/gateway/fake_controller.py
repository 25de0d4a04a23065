"""A stand-in for the controller's services API (the real routes are being built beside the gateway): the
wire contract of docs/decisions/0018-service-gateway.md, served by aiohttp in a thread on loopback.
`GET /api/v1/services`, `GET /api/v1/services/{name}/endpoints?after=V` (a long poll), `GET /api/v1/whoami`
and `POST /api/v1/services/{name}/load` (recorded in `loads`). It can be stopped and started again on the
same port (a controller failing over)."""
from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

from aiohttp import web

SECRET = "fake-controller-secret"
LONG_POLL_S = 5.0


class FakeController:
    def __init__(self, standby_for: str | None = None) -> None:
        """`standby_for`: a standby that answers every request 421 naming that leader."""
        self.standby_for = standby_for
        self.services: dict[str, dict[str, Any]] = {}  # name -> endpoints reply
        self.loads: list[tuple[str, dict[str, Any]]] = []
        self.whoami_calls = 0
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._changed: asyncio.Condition | None = None
        self._runner: web.AppRunner | None = None
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.url = f"http://127.0.0.1:{self.port}"

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    def set_endpoints(self, name: str, addresses: list[str], *, public: bool = True,
                      draining: frozenset[str] = frozenset()) -> None:
        async def change() -> None:
            version = self.services.get(name, {}).get("version", 0) + 1
            self.services[name] = {"service": name, "version": version, "public": public, "endpoints": [
                {"replica": i, "job_id": 100 + i, "ports": {"http": address}, "draining": address in draining}
                for i, address in enumerate(addresses)]}
            assert self._changed is not None
            async with self._changed:
                self._changed.notify_all()
        self._call(change())

    def delete(self, name: str) -> None:
        async def change() -> None:
            del self.services[name]
            assert self._changed is not None
            async with self._changed:
                self._changed.notify_all()
        self._call(change())

    def start(self) -> FakeController:
        if not self._thread.is_alive():
            self._thread.start()
        self._call(self._serve())
        return self

    def stop(self) -> None:
        async def stop() -> None:
            assert self._runner is not None
            await self._runner.cleanup()
        self._call(stop())

    def close(self) -> None:
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)

    async def _serve(self) -> None:
        self._changed = self._changed or asyncio.Condition()
        app = web.Application(middlewares=[self._standby, _authenticated])
        app.router.add_get("/api/v1/services", self._list)
        app.router.add_get("/api/v1/services/{name}/endpoints", self._endpoints)
        app.router.add_post("/api/v1/services/{name}/load", self._load)
        app.router.add_get("/api/v1/whoami", self._whoami)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()

    @web.middleware
    async def _standby(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.standby_for is not None:
            return web.json_response({"detail": "not the leader"}, status=421,
                                     headers={"X-Corral-Leader": self.standby_for})
        response: web.StreamResponse = await handler(request)
        return response

    async def _list(self, request: web.Request) -> web.Response:
        return web.json_response([{"name": name} for name in self.services])

    async def _endpoints(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.services:
            return web.json_response({"detail": f"no service {name}"}, status=404)
        after = int(request.query.get("after", "-1"))
        assert self._changed is not None
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(
                    lambda: name not in self.services or self.services[name]["version"] > after), LONG_POLL_S)
            except TimeoutError:
                pass
        if name not in self.services:
            return web.json_response({"detail": f"no service {name}"}, status=404)
        return web.json_response(self.services[name])

    async def _load(self, request: web.Request) -> web.Response:
        self.loads.append((request.match_info["name"], await request.json()))
        return web.json_response({}, status=202)

    async def _whoami(self, request: web.Request) -> web.Response:
        self.whoami_calls += 1
        await asyncio.sleep(0.2)  # a controller under load: concurrent checks overlap
        return web.json_response({"kind": "service", "name": "root", "uid": 0, "credential": "secret",
                                  "roles": ["admin"]})


@web.middleware
async def _authenticated(request: web.Request, handler: Any) -> web.StreamResponse:
    if request.headers.get("Authorization") != f"Bearer {SECRET}":
        return web.json_response({"detail": "bad credential"}, status=401)
    response: web.StreamResponse = await handler(request)
    return response
