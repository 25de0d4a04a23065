"""The real controller (corral.controller.__main__.build_app: engine, service, routes, SQLite store)
served on 127.0.0.1 in a thread, with one registered node and no agents: submitted jobs stay PENDING
(no scheduling loop runs), which is all the id tests need; cancel, hold and release act for real."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx

from corral.controller.__main__ import build_app
from corral.engine.config import EngineConfig
from corral.protocol import API_PREFIX
from corral.store import Store
from tests.cli.standin import ServerThread

SECRET = "live-secret"


class LiveController:
    def __init__(self, url: str, workdir: Path) -> None:
        self.url = url
        self.workdir = workdir
        self.http = httpx.Client(base_url=url + API_PREFIX, headers={"Authorization": f"Bearer {SECRET}"},
                                 timeout=10, trust_env=False)

    def submit(self, **fields) -> dict:
        reply = self.http.post("/jobs", json={"workdir": str(self.workdir), "user": "alice", "argv": ["true"],
                                              **fields})
        assert reply.status_code == 201, reply.text
        return reply.json()

    def job(self, job_id: int) -> dict:
        reply = self.http.get(f"/jobs/{job_id}")
        assert reply.status_code == 200, reply.text
        return reply.json()

    def states(self) -> dict[int, str]:
        return {j["id"]: j["state"] for j in self.http.get("/jobs", params={"all": "true"}).json()}


@contextlib.contextmanager
def live_controller(root: Path) -> Iterator[LiveController]:
    store = Store.open(f"sqlite:///{root / 'corral.db'}")
    with ServerThread(build_app(EngineConfig(), store, SECRET)) as server:
        live = LiveController(server.url, root)
        reply = live.http.post("/agents/register", json={"node": "node1", "address": "127.0.0.1", "gpus": [],
                                                         "cpus": 16, "mem_mib": 64000})
        assert reply.status_code == 200, reply.text
        try:
            yield live
        finally:
            live.http.close()
