"""The state-store contract, in process: the controller's app over httpx's ASGI transport, a fake clock and a
fake agent speaking the agent protocol (as in tests/sim/test_replay_equivalence.py), on real databases.

A commit that fails leaves nothing behind: not the stimulus's own effects, not the commands of a cycle
(a launch decided by a cycle that could not be committed never goes out), not an agent's report (refused,
so the agent keeps it). Once writes work again, the engine is the one the store holds."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from corral.api.schemas import JobSubmit
from corral.controller.app import create_app
from corral.controller.restore import restore_engine
from corral.controller.service import ControllerService
from corral.controller.writer import StoreUnavailable
from corral.engine.config import LIVE, EngineConfig
from corral.engine.records import JobState
from corral.protocol import API_PREFIX, EPOCH_HEADER, Registration
from corral.store import Store
from tests.e2e.faults import fill_disk, small_tmpfs
from tests.store.pg import fresh_pg_schema, pg_server_url_or_skip

T0 = 1_750_000_000.0
SECRET = "contract-secret"
JOB = {"name": "j", "argv": ["true"], "workdir": "/tmp", "user": "u", "gpus": 1}
REGISTRATION = {"node": "n1", "address": "127.0.0.1", "cpus": 16, "mem_mib": 64_000,
                "gpus": [{"index": i, "model": "sim-gpu"} for i in range(4)]}


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def controller(url: str) -> tuple[ControllerService, Store, FakeClock]:
    clock = FakeClock(T0)
    store = Store.open(url)
    return ControllerService(restore_engine(EngineConfig(), LIVE, store, clock()), store, clock), store, clock


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def register(http: httpx.AsyncClient) -> str:
    reply = await http.post(f"{API_PREFIX}/agents/register", json=REGISTRATION)
    assert reply.status_code == 200, reply.text
    return reply.json()["epoch"]


async def poll(http: httpx.AsyncClient, epoch: str) -> httpx.Response:
    return await http.get(f"{API_PREFIX}/agents/n1/commands", params={"after": 0, "wait_s": 0},
                          headers={EPOCH_HEADER: epoch})


def test_a_cycle_that_cannot_commit_sends_nothing_and_changes_nothing(tmp_path: Path) -> None:
    async def scenario(database: Path) -> None:
        service, store, clock = controller(f"sqlite:///{database / 'corral.db'}")
        transport = httpx.ASGITransport(app=create_app(service, SECRET))
        async with httpx.AsyncClient(transport=transport, base_url="http://controller",
                                     headers={"Authorization": f"Bearer {SECRET}"}) as http:
            epoch = await register(http)
            ids = [(await http.post(f"{API_PREFIX}/jobs", json=JOB)).json()["job_id"] for _ in range(2)]
            clock.now += 1.0  # past the start delay: the next cycle starts both jobs
            filler = fill_disk(database)
            with pytest.raises(StoreUnavailable, match="database or disk is full"):
                await service.run_cycle()

            assert (await poll(http, epoch)).status_code == 409, "the agent must register again"
            await until(lambda: all(job.state is JobState.PENDING for job in service.engine.jobs.values()))
            assert sorted(service.engine.jobs) == ids and not service.engine.life.dirty
            listed = (await http.get(f"{API_PREFIX}/jobs")).json()
            assert [(job["id"], job["state"], job["nodelist"]) for job in listed] == [(i, "PENDING", "") for i in ids]
            assert (await http.post(f"{API_PREFIX}/jobs", json=JOB)).status_code == 503
            assert (await http.post(f"{API_PREFIX}/agents/register", json=REGISTRATION)).status_code == 503
            finished = {"events": [{"kind": "finished", "job_id": ids[0], "tasks": []}]}
            reply = await http.post(f"{API_PREFIX}/agents/n1/events", json=finished, headers={EPOCH_HEADER: epoch})
            assert reply.status_code == 503, "an agent's report is refused (kept by the agent), not dropped"
            with pytest.raises(StoreUnavailable):
                await service.run_cycle()

            filler.unlink()
            await until(lambda: service.health() is None)
            epoch = await register(http)
            await service.run_cycle()
            launches = [c for c in (await poll(http, epoch)).json()["commands"] if c["kind"] == "launch"]
            assert sorted(c["job_id"] for c in launches) == ids
            assert [store.get_job(i).state for i in ids] == [JobState.RUNNING] * 2
        await service.stop()
        store.close()

    with small_tmpfs(tmp_path / "db") as database:
        asyncio.run(scenario(database))


@pytest.mark.postgres
def test_a_value_postgresql_refuses_leaves_nothing_half_applied() -> None:
    async def scenario(url: str) -> None:
        service, store, _clock = controller(url)
        await service.register(Registration(**REGISTRATION))
        first, _ = await service.submit(JobSubmit(**JOB))
        # Past the API's validation, as any value the database refuses would be.
        bad = JobSubmit(**JOB).model_copy(update={"name": "bad\x00name"})
        with pytest.raises(StoreUnavailable, match="NUL"):
            await service.submit(bad)
        await until(lambda: service.health() is None)
        assert sorted(service.engine.jobs) == [first] and store.get_job(first + 1) is None
        second, _ = await service.submit(JobSubmit(**JOB))
        assert second == first + 1, "the refused submission took no job id"
        assert store.get_job(second).spec.name == "j"
        await service.stop()
        store.close()

    with fresh_pg_schema(pg_server_url_or_skip()) as url:
        asyncio.run(scenario(url))
