"""Job lists are built a few at a time (app.py's list_slots): many clients listing at once wait their turn
instead of each holding a half-built answer (bench/polling_load.py saw 4.8 GiB with 1,000 `squeue -r`)."""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from corral.controller import listing
from corral.controller.__main__ import build_app
from corral.engine.config import EngineConfig
from corral.protocol import API_PREFIX
from corral.store import Store
from tests.cli.standin import ServerThread

SECRET = "list-slots-secret"


def test_at_most_lists_at_once_job_lists_are_built_side_by_side(tmp_path, monkeypatch):
    building, most = 0, 0
    lock = threading.Lock()
    real_active, real_stored = listing.active_jobs, listing.stored_jobs

    def counted(real):
        async def build(*args, **kwargs):
            nonlocal building, most
            with lock:
                building += 1
                most = max(most, building)
            try:
                await asyncio.sleep(0.05)  # a long list: others arrive meanwhile
                return await real(*args, **kwargs)
            finally:
                with lock:
                    building -= 1
        return build

    monkeypatch.setattr(listing, "active_jobs", counted(real_active))
    monkeypatch.setattr(listing, "stored_jobs", counted(real_stored))
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    paths = ["/jobs", "/jobs?all=true", "/accounting"] * 8
    with ServerThread(build_app(EngineConfig(), store, SECRET)) as server, \
            httpx.Client(base_url=server.url + API_PREFIX, headers={"Authorization": f"Bearer {SECRET}"},
                         timeout=30, trust_env=False) as client, ThreadPoolExecutor(len(paths)) as pool:
        codes = list(pool.map(lambda path: client.get(path).status_code, paths))
    assert codes == [200] * len(paths)
    assert most == listing.LISTS_AT_ONCE
