"""The OpenAPI document is part of the API: what the HTTP layers do per request may change (decision 0023's
amendment), what they declare may not unless on purpose. GET /openapi.json must serve, byte for byte, the
document in openapi.json beside this test (written from main before the HTTP layers were made cheaper).
A change to a route that is meant to change the API rewrites it: `python -m tests.api.test_openapi_document`."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx

from corral.controller.app import create_app
from corral.controller.restore import restore_engine
from corral.controller.service import ControllerService
from corral.engine.config import LIVE, EngineConfig
from corral.store import Store

EXPECTED = Path(__file__).with_name("openapi.json")


def served_document(directory: Path) -> bytes:
    store = Store.open(f"sqlite:///{directory / 'corral.db'}")
    service = ControllerService(restore_engine(EngineConfig(), LIVE, store, 0.0), store, clock=lambda: 0.0)
    app = create_app(service, "openapi-secret")

    async def fetch() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://controller") as client:
            return await client.get("/openapi.json")

    reply = asyncio.run(fetch())
    assert reply.status_code == 200, reply.text
    return reply.content


def test_the_openapi_document_is_unchanged(tmp_path) -> None:
    served = served_document(tmp_path)
    assert served == EXPECTED.read_bytes(), (
        "GET /openapi.json differs from tests/api/openapi.json: a change to what the API declares "
        "(if meant, rewrite it with `python -m tests.api.test_openapi_document`)")


if __name__ == "__main__":
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        EXPECTED.write_bytes(served_document(Path(tmp)))
    sys.stdout.write(f"wrote {EXPECTED}\n")
