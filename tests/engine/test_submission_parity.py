"""The live controller and the simulator accept and refuse the same submissions (issue 11): one table of
submissions, made in order through the real controller (its FastAPI app over a real SQLite store, httpx's
ASGI transport) and through the simulator's submission path, gives the same job ids, the same refusal
messages and the same job records on both."""
from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from corral.api.schemas import JobSubmit
from corral.api.tenancy import ReservationSpec, TenancySpec
from corral.controller.app import create_app
from corral.controller.restore import restore_engine
from corral.controller.service import ControllerService
from corral.core.model import Gpu, Request
from corral.engine.config import LIVE, EngineConfig, PartitionConfig
from corral.engine.engine import Engine
from corral.engine.events import ReservationAdded
from corral.engine.records import Job, JobSpec, JobState, Node
from corral.protocol import API_PREFIX
from corral.sim.driver import SimNode, SimSubmission, Simulation
from corral.store import Store
from tests.host_users import absent_user

SECRET = "parity-secret"
# Nobody the host knows: the controller takes a known user's uid from this host, the simulator has no host.
ALICE, BOB = absent_user("alice"), absent_user("bob")
T0 = 1_750_000_000.0
NOW = T0 + 100.0
CPUS, MEM_MIB = 64, 512_000
CONFIG = EngineConfig(partitions=(PartitionConfig("gpu", default=True), PartitionConfig("short", max_time_s=600)))
TENANCY = TenancySpec(
    accounts=[{"name": "a"}, {"name": "b"}],
    users=[{"name": ALICE, "accounts": ["a"]}, {"name": BOB, "accounts": ["b"]}],
    limits=[{"user": BOB, "max_submit_jobs": 2}])
RESERVATION = ReservationSpec(name="bobs", start=T0 + 50, end=T0 + 86400, nodes="n1", users=[BOB])
ENDED_JOB = 1  # both paths start with job 1 ended (COMPLETED); the table's ids start at 2

# (fields beyond a plain command of alice's, accepted?)
TABLE: list[tuple[dict, bool]] = [
    ({}, True),  # job 2
    ({"partition": "nope"}, False),
    ({"gpus_per_node": 9}, False),  # n1 has 8
    ({"partition": "short", "time_limit_s": 601}, False),
    ({"partition": "short", "time_limit_s": 600}, True),  # job 3
    ({"account": "b"}, False),  # alice may not charge b
    ({"reservation": "nope"}, False),
    ({"reservation": "bobs"}, False),  # bob's only
    ({"user": BOB, "reservation": "bobs"}, True),  # job 4: bob's first
    ({"dependency": "afterok:999"}, False),
    ({"dependency": "afterok:two"}, False),
    ({"dependency": f"afterok:{ENDED_JOB}"}, True),  # job 5: on an ended job (the store / the sim's archive)
    ({"dependency": "afterany:2:3"}, True),  # job 6: on pending ones
    ({"array": "0-1001"}, False),  # past MaxArraySize
    ({"array": "0-3%2"}, True),  # jobs 7-10
    ({"dependency": "afterok:7_2"}, True),  # job 11: one task of the array
    ({"dependency": "afterok:2_1"}, False),  # 2 is no array
    ({"user": BOB, "array": "0-1"}, False),  # 1 + 2 would pass bob's max_submit_jobs 2
    ({"user": BOB, "hold": True}, True),  # job 12: bob's second
    ({"user": BOB}, False),  # a third
    ({"script": "echo no interpreter line", "argv": None}, False),
]


def submission(fields: dict) -> JobSubmit:
    return JobSubmit(**{"argv": ["true"], "workdir": "/tmp", "user": ALICE, "gpus_per_node": 1, **fields})


def outcome_through_the_controller(directory: Path) -> tuple[list[tuple], Engine]:
    store = Store.open(f"sqlite:///{directory / 'corral.db'}")
    ended = Job(id=ENDED_JOB, spec=JobSpec(name="done", user=ALICE, request=Request(gpus_per_node=1, partition="gpu"),
                                           argv=("true",), account="a"),
                submit_time=T0, state=JobState.COMPLETED, start_time=T0 + 1, end_time=T0 + 11)
    node = Node("n1", tuple(Gpu(i, "sim-gpu") for i in range(8)), CPUS, MEM_MIB, up=True,
                partitions=frozenset({"gpu", "short"}))
    store.save(jobs=[ended], nodes=[node])
    service = ControllerService(restore_engine(CONFIG, LIVE, store, NOW, TENANCY), store, clock=lambda: NOW)
    app = create_app(service, SECRET)

    async def submit_all() -> list[tuple]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://c{API_PREFIX}",
                                     headers={"Authorization": f"Bearer {SECRET}"}) as client:
            reply = await client.post("/reservations", json=RESERVATION.model_dump())
            assert reply.status_code == 201, reply.text
            out = []
            for fields, _ in TABLE:
                reply = await client.post("/jobs", json=submission(fields).model_dump(exclude_unset=True))
                assert reply.status_code in (201, 422), reply.text
                body = reply.json()
                out.append(("accepted", body["job_id"], body["task_ids"]) if reply.status_code == 201
                           else ("refused", body["detail"]))
            return out

    return asyncio.run(submit_all()), service.engine


def outcome_through_the_simulator() -> tuple[list[tuple], Engine]:
    sim = Simulation(CONFIG, [SimNode("n1", 8, CPUS, MEM_MIB)], TENANCY, start_s=T0)
    sim.submit([SimSubmission(T0, submission({"name": "done"}), 10.0)])
    sim.run(until_s=T0 + 50)
    assert [(j.id, j.state) for j in sim.result.finished] == [(ENDED_JOB, JobState.COMPLETED)]
    sim.engine.handle(ReservationAdded(RESERVATION), now=T0 + 50)
    sim.submit(SimSubmission(NOW, submission(fields), 1000.0) for fields, _ in TABLE)
    sim.run(until_s=NOW)
    out = []
    for index in range(len(TABLE)):
        if index in sim.result.refused:
            out.append(("refused", sim.result.refused[index]))
        else:
            first = sim.result.ids[index]
            tasks = sorted(j.id for j in sim.engine.jobs.values() if j.spec.array_job_id == first)
            out.append(("accepted", first, tasks))
    return out, sim.engine


def test_the_controller_and_the_simulator_accept_and_refuse_the_same_submissions(tmp_path) -> None:
    live, live_engine = outcome_through_the_controller(tmp_path)
    simulated, sim_engine = outcome_through_the_simulator()
    assert [row[0] == "accepted" for row in live] == [accepted for _, accepted in TABLE], live
    assert simulated == live
    assert all(row[1] for row in live if row[0] == "refused"), "every refusal says why"
    created = sorted(live_engine.jobs)
    assert created == sorted(sim_engine.jobs) == list(range(2, 13))
    for job_id in created:
        live_job, sim_job = live_engine.jobs[job_id], sim_engine.jobs[job_id]
        assert (sim_job.spec, sim_job.held) == (live_job.spec, live_job.held), job_id
    assert live_engine.jobs[5].spec.dependency == f"afterok:{ENDED_JOB}"
    assert live_engine.jobs[11].spec.dependency == "afterok:9"  # task 2 of array 7
    assert live_engine.jobs[12].held
