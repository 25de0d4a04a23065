"""The live scheduling loop's pace (controller/scheduling_loop.py, engine/pacer.py), in process: the real
controller service and its loop on the real clock, real SQLite, the agent protocol over httpx's ASGI
transport, one registered node and no agent.

A submission whose jobs must wait their start delay runs no cycle of its own: the loop sets its timer to
their start and one cycle then starts what came meanwhile; cycles start no closer than the live minimum
interval; a job on a quiet cluster still starts at its start delay, in one cycle."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from corral.controller.app import create_app
from corral.controller.restore import restore_engine
from corral.controller.service import ControllerService
from corral.engine.config import LIVE, EngineConfig
from corral.engine.pacer import LIVE_MIN_INTERVAL_S
from corral.engine.records import JobState
from corral.protocol import API_PREFIX, EPOCH_HEADER
from corral.store import Store

SECRET = "pacing-secret"
START_DELAY_S = 0.3  # EngineConfig's default, named here because the test counts on it
JOB = {"name": "j", "argv": ["true"], "workdir": "/tmp", "user": "u", "gpus": 1}
REGISTRATION = {"node": "n1", "address": "127.0.0.1", "cpus": 64, "mem_mib": 64_000,
                "gpus": [{"index": i, "model": "sim-gpu"} for i in range(32)]}


async def until(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def settled(service: ControllerService) -> int:
    """The cycles run so far, once the loop has had nothing to do for a while (the registration's cycle)."""
    cycles = -1
    while cycles != service.cycles:
        cycles = service.cycles
        await asyncio.sleep(LIVE_MIN_INTERVAL_S + START_DELAY_S)
    return cycles


def run_with_loop(tmp_path: Path, scenario, min_cycle_interval_s: float = LIVE_MIN_INTERVAL_S) -> None:
    async def main() -> None:
        store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
        config = EngineConfig(start_delay_s=START_DELAY_S, min_cycle_interval_s=min_cycle_interval_s)
        service = ControllerService(restore_engine(config, LIVE, store, time.time()), store, time.time)
        await service.start()
        try:
            transport = httpx.ASGITransport(app=create_app(service, SECRET))
            async with httpx.AsyncClient(transport=transport, base_url="http://controller",
                                         headers={"Authorization": f"Bearer {SECRET}"}) as http:
                reply = await http.post(f"{API_PREFIX}/agents/register", json=REGISTRATION)
                assert reply.status_code == 200, reply.text
                await scenario(service, http, reply.json()["epoch"])
        finally:
            await service.stop()
            store.close()

    asyncio.run(main())


async def submit(http: httpx.AsyncClient, **fields) -> int:
    reply = await http.post(f"{API_PREFIX}/jobs", json={**JOB, **fields})
    assert reply.status_code == 201, reply.text
    return reply.json()["job_id"]


async def launched(http: httpx.AsyncClient, epoch: str) -> list[int]:
    reply = await http.get(f"{API_PREFIX}/agents/n1/commands", params={"after": 0, "wait_s": 0},
                           headers={EPOCH_HEADER: epoch})
    assert reply.status_code == 200, reply.text
    return sorted(c["job_id"] for c in reply.json()["commands"] if c["kind"] == "launch")


def test_a_lone_job_on_a_quiet_cluster_starts_in_one_cycle_at_its_start_delay(tmp_path: Path) -> None:
    async def scenario(service: ControllerService, http: httpx.AsyncClient, epoch: str) -> None:
        before = await settled(service)
        submitted = time.time()
        job_id = await submit(http)
        await until(lambda: service.engine.jobs[job_id].state is JobState.RUNNING)
        started = service.engine.jobs[job_id].start_time
        assert started is not None and started >= submitted + START_DELAY_S
        assert service.cycles == before + 1, "no cycle for the submission itself: only the one that starts it"
        assert await launched(http, epoch) == [job_id]

    run_with_loop(tmp_path, scenario)


def test_a_submission_a_gate_holds_gets_its_reason_from_a_cycle_at_once(tmp_path: Path) -> None:
    async def scenario(service: ControllerService, http: httpx.AsyncClient, epoch: str) -> None:
        first = await submit(http, hold=True)
        before = await settled(service)
        waiting = await submit(http, dependency=f"afterok:{first}")
        await until(lambda: service.cycles > before, timeout_s=START_DELAY_S * 0.9)
        await until(lambda: service.engine.jobs[waiting].reason == "Dependency")

    run_with_loop(tmp_path, scenario)


def test_with_no_minimum_interval_a_burst_runs_a_cycle_per_start(tmp_path: Path) -> None:
    async def scenario(service: ControllerService, http: httpx.AsyncClient, epoch: str) -> None:
        before = await settled(service)
        ids = []
        for _ in range(6):  # each start delay ends in a cycle of its own
            ids.append(await submit(http))
            await asyncio.sleep(0.05)
        await until(lambda: all(service.engine.jobs[i].state is JobState.RUNNING for i in ids))
        assert service.cycles - before >= len(ids)

    run_with_loop(tmp_path, scenario, min_cycle_interval_s=0.0)


def test_a_burst_of_submissions_starts_in_few_cycles_and_every_job_starts(tmp_path: Path) -> None:
    async def scenario(service: ControllerService, http: httpx.AsyncClient, epoch: str) -> None:
        before = await settled(service)
        began = time.perf_counter()
        ids = []
        for _ in range(24):  # one after another, as a workflow tool's sbatch calls come
            ids.append(await submit(http))
            await asyncio.sleep(0.02)
        await until(lambda: all(service.engine.jobs[i].state is JobState.RUNNING for i in ids))
        took_s = time.perf_counter() - began
        cycles = service.cycles - before
        # One cycle per submission before; now no more than the minimum interval allows (and one more
        # for the start of the first interval), whatever the machine's load made the burst last.
        assert cycles <= took_s / LIVE_MIN_INTERVAL_S + 2, (cycles, took_s)
        assert cycles < len(ids), (cycles, took_s)
        assert await launched(http, epoch) == ids

    run_with_loop(tmp_path, scenario)
