"""The real controller app (engine, SQLite store, routes) served in-process over httpx's ASGI
transport: its replies, 500s included, without a socket or a scheduling loop."""
from __future__ import annotations

import asyncio

import httpx

from corral.controller.__main__ import build_app
from corral.controller.settings import load_settings
from corral.protocol import API_PREFIX
from corral.store import Store

SECRET = "limits-secret"
NODE = {"node": "node1", "address": "127.0.0.1", "gpus": [{"index": i} for i in range(4)], "cpus": 16,
        "mem_mib": 64000}


class InProcessController:
    def __init__(self, db_url: str) -> None:
        config, tenancy = load_settings(None)
        self.app = build_app(config, Store.open(db_url), SECRET, tenancy=tenancy)

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://controller",
                                         headers={"Authorization": f"Bearer {SECRET}"}) as client:
                return await client.request(method, API_PREFIX + path, **kwargs)

        return asyncio.run(send())

    def get(self, path: str, **kwargs) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs) -> httpx.Response:
        return self.request("POST", path, **kwargs)

    def post_raw(self, path: str, body: str) -> httpx.Response:
        """A JSON text as written: escapes such as \\ud800 and tokens such as NaN reach the server."""
        return self.post(path, content=body.encode(), headers={"Content-Type": "application/json"})

    def submit(self, **fields) -> httpx.Response:
        return self.post("/jobs", json={"workdir": "/tmp", "user": "alice", "argv": ["true"], **fields})
