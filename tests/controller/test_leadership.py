"""Controllers sharing one database (real SQLite and PostgreSQL), in this process: one leads, the others answer
421 naming it; a leader whose lease moved on without its knowing can commit nothing (the store's fence) and
stands by; a leader that cannot prove its lease by its own clock stops; a stopping leader hands over at once."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from corral.controller.app import create_app
from corral.controller.leadership import Leadership
from corral.controller.restore import restore_engine
from corral.controller.service import ControllerService
from corral.engine.config import LIVE, EngineConfig
from corral.protocol import API_PREFIX
from corral.store import Store
from corral.store.lease import LeaseLost, Leases
from tests.controller.conftest import node
from tests.store.conftest import BACKENDS, backend_url, pg_server_url  # noqa: F401 (a fixture)

SECRET = "lease-secret"
JOB = {"workdir": "/tmp", "user": "alice", "argv": ["true"]}


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request.param, request, tmp_path) as url:
        yield url


class Controller:
    def __init__(self, db_url: str, name: str, **lease) -> None:
        self.store = Store.open(db_url)
        config = EngineConfig()
        self.url = f"http://{name}:6817"
        self.service = ControllerService(
            None, self.store, restore=lambda now: restore_engine(config, LIVE, self.store, now),
            leadership=Leadership(self.store, self.url, **lease), config=config)
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(self.service, SECRET)),
                                        base_url=f"http://{name}{API_PREFIX}",
                                        headers={"Authorization": f"Bearer {SECRET}"})

    async def turn(self) -> None:
        """One turn of the lease loop, and the takeover it started, if any."""
        await self.service.leadership.first_turn()

    async def close(self) -> None:
        await self.client.aclose()
        await self.service.leadership.stop()
        self.service.writer.close()
        self.store.close()


def run(db_url: str, scenario: Callable, **lease) -> None:
    with Store.open(db_url) as store:
        store.save(nodes=[node("n1")])  # a node, so that submissions are admitted

    async def main() -> None:
        a, b = Controller(db_url, "a", **lease), Controller(db_url, "b", **lease)
        try:
            await scenario(a, b)
        finally:
            for controller in (a, b):
                await controller.close()

    asyncio.run(main())


def test_one_leads_the_other_answers_421_naming_it(db_url: str) -> None:
    async def scenario(a: Controller, b: Controller) -> None:
        await a.turn()
        await b.turn()
        assert (await a.client.post("/jobs", json=JOB)).status_code == 201
        refused = await b.client.get("/jobs")
        assert refused.status_code == 421
        assert refused.json() == {"detail": "not the leader: the leader is http://a:6817", "leader": "http://a:6817"}
        assert refused.headers["X-Corral-Leader"] == "http://a:6817"
        assert (await b.client.post("/agents/register", json={})).status_code == 421
        assert (await b.client.get("/health")).json()["role"] == "standby"
        status = (await b.client.get("/status")).json()
        assert {k: status[k] for k in ("role", "epoch", "url", "leader")} == {
            "role": "standby", "epoch": 1, "url": "http://b:6817", "leader": "http://a:6817"}
        assert sorted((c["url"], c["role"], c["epoch"]) for c in status["controllers"]) == [
            ("http://a:6817", "leader", 1), ("http://b:6817", "standby", 1)]
        assert (await a.client.get("/status")).json()["role"] == "leader"
        assert b.service._engine is None, "a standby holds no engine"

    run(db_url, scenario)


def test_a_leader_whose_lease_moved_on_unknown_to_it_commits_nothing_and_stands_by(db_url: str) -> None:
    frozen = time.monotonic()  # its own clock stands still, as a paused process sees it: it trusts its lease

    async def scenario(a: Controller, b: Controller) -> None:
        await a.turn()
        first = (await a.client.post("/jobs", json=JOB)).json()["job_id"]
        Leases(b.store.engine).release(1)  # as if a's lease had run out while a was paused
        await b.turn()
        assert b.service.leadership.leading and b.service.leadership.epoch == 2
        assert a.service.leadership.proven(), "a believes it still leads"
        refused = await a.client.post("/jobs", json=JOB)
        assert refused.status_code == 421, refused.text
        assert refused.json()["leader"] == "http://b:6817"
        assert not a.service.leadership.leading and a.service._engine is None
        with pytest.raises(LeaseLost):
            a.store.save(meta={"x": "y"})  # the stepped-down store writes nothing at all
        assert (await a.client.get("/jobs")).status_code == 421
        second = (await b.client.post("/jobs", json=JOB)).json()["job_id"]
        assert second == first + 1, "nothing of a's refused submission was stored"

    run(db_url, scenario, monotonic=lambda: frozen)


@pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_on_postgresql_a_leader_that_cannot_renew_stops_by_its_own_clock(db_url: str) -> None:
    async def scenario(a: Controller, b: Controller) -> None:
        await a.turn()  # leads; the loop does not run, so nothing renews the lease
        assert (await a.client.post("/jobs", json=JOB)).status_code == 201
        await asyncio.sleep(0.5)  # past ttl - margin by its own clock, before the lease expires in the database
        assert not a.service.leadership.leading
        assert (await a.client.post("/jobs", json=JOB)).status_code == 421
        await asyncio.sleep(0.3)
        await b.turn()
        assert b.service.leadership.leading and b.service.leadership.epoch == 2

    run(db_url, scenario, ttl_s=0.6, margin_s=0.2)


def test_a_stopping_leader_hands_over_at_once(db_url: str) -> None:
    async def scenario(a: Controller, b: Controller) -> None:
        await a.turn()
        await b.turn()
        assert not b.service.leadership.leading
        await a.service.leadership.stop()
        await b.turn()
        assert b.service.leadership.leading and b.service.leadership.epoch == 2
        assert (await b.client.post("/jobs", json=JOB)).status_code == 201

    run(db_url, scenario)
