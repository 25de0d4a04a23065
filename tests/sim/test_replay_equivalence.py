"""Replay equivalence (issue 5): a recorded workload through the simulator and through the live controller
gives the same decisions.

Path 1 is `corral.sim.driver.Simulation`. Path 2 is the real controller: `ControllerService` on a SQLite
store, its FastAPI app driven over HTTP (httpx's ASGI transport, no sockets), fake agents that register,
poll their commands and report task exits through the agent protocol at the recorded durations, and a fake
clock the test advances. The test plays the controller loop's part, in simulated time, with the pacer both
loops use (corral.engine.pacer): it runs a cycle whenever the service was poked (a submission, a task
exit), until nothing pokes it at that instant, and otherwise when the pacer's one timer rings. The engine is
built with the simulator's profile (config.SIMULATED): the fake agents never go silent, and jobs may start
as soon as they are submitted.

The workload (tests/sim/fixtures/replay_workload.csv) is congested on purpose: backfill with reservations,
cohort queues that borrow and are reclaimed by preemption (requeue), a QOS that preempts, multi-node gangs
and jobs that run past their time limit. Compared: every launch (time, job, node, devices) and every kill
(time, job, node, signal, grace), and each job's final record (state, start, end, slices, restarts).
"""
from __future__ import annotations

import asyncio
import csv
import heapq
import itertools
from pathlib import Path

import httpx
import pytest

from corral.api.schemas import JobSubmit
from corral.api.services import ServiceSpec
from corral.api.tenancy import TenancySpec
from corral.controller.app import create_app
from corral.controller.restore import restore_engine
from corral.controller.service import ControllerService
from corral.core.config import SchedulerConfig
from corral.engine.commands import Kill, Launch
from corral.engine.config import SIMULATED, EngineConfig, PartitionConfig
from corral.engine.events import ServiceApplied, ServiceDeleted
from corral.engine.pacer import CyclePacer
from corral.protocol import API_PREFIX, EPOCH_HEADER
from corral.sim.driver import SimNode, SimService, SimSubmission, Simulation
from corral.store import Store

WORKLOAD = Path(__file__).parent / "fixtures" / "replay_workload.csv"
T0 = 1_750_000_000.0
NODES = ("n1", "n2", "n3", "n4")
GPUS, CPUS, MEM_MIB = 8, 128, 2_048_000
STOP_DELAY_S = 2.0  # how long a signalled task takes to exit (both paths)
SECRET = "replay-secret"

CONFIG = EngineConfig(partitions=(PartitionConfig("gpu", default=True),),
                      scheduler=SchedulerConfig(max_reservations=4, backfill=True), kill_grace_s=5.0)
TENANCY = TenancySpec(
    accounts=[{"name": a} for a in "abc"],
    users=[{"name": f"u{a}", "accounts": [a]} for a in "abc"],
    qos=[{"name": "normal"}, {"name": "high", "priority": 100, "preempts": ["normal"], "grace_s": 20.0}],
    queues=[{"name": f"q{a}", "cohort": "all", "accounts": [a], "nominal": {"gpu": g}}
            for a, g in (("a", 16), ("b", 8), ("c", 8))],
    priority={"weight_age": 1000, "weight_fairshare": 2000, "weight_qos": 3000, "calc_period_s": 300},
)


def recorded() -> list[tuple[float, dict, float]]:
    """(submit time, the submission as a user sends it, how long it runs)."""
    lines = [line for line in WORKLOAD.read_text().splitlines() if not line.startswith("#")]
    out = []
    for i, row in enumerate(csv.DictReader(lines)):
        body = {"name": f"r{i}", "argv": ["true"], "workdir": "/tmp", "user": row["user"],
                "nodes": int(row["nodes"]), "ntasks_per_node": 1, "gpus_per_node": int(row["gpus_per_node"]),
                "time_limit_s": int(row["time_limit_s"]), "qos": row["qos"]}
        out.append((T0 + float(row["submit_s"]), body, float(row["duration_s"])))
    return out


# ----- path 1: the simulator


class RecordingSimulation(Simulation):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple] = []

    def _carry_out(self, commands, now: float) -> None:
        for cmd in commands:
            if isinstance(cmd, Launch):
                job = self.engine.jobs[cmd.job_id]
                gpus = next(s.gpus for s in job.slices if s.node == cmd.node)
                self.log.append((now, "launch", cmd.job_id, cmd.node, tuple(gpus)))
            elif isinstance(cmd, Kill):
                self.log.append((now, "kill", cmd.job_id, cmd.node, int(cmd.signal), float(cmd.grace_s)))
        super()._carry_out(commands, now)


def run_simulator(workload, services: tuple[SimService, ...] = (),
                  replica_ids: set[int] | None = None) -> tuple[list[tuple], dict[int, dict]]:
    """`replica_ids`: filled with the ids of the services' replicas."""
    sim = RecordingSimulation(CONFIG, [SimNode(n, GPUS, CPUS, MEM_MIB) for n in NODES], TENANCY,
                              stop_delay_s=STOP_DELAY_S, start_s=T0)
    sim.submit(SimSubmission(at, JobSubmit(**body), duration) for at, body, duration in workload)
    sim.apply_services(services)
    result = sim.run()
    assert not result.refused
    finals = {job.id: {"state": job.state.value, "start": job.start_time, "end": job.end_time,
                       "slices": [(s.node, tuple(s.gpus)) for s in job.slices], "restarts": job.restart_count}
              for job in result.finished}
    if replica_ids is not None:
        replica_ids.update(job.id for job in result.finished if job.spec.service)
    return sim.log, finals


# ----- path 2: the live controller


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeAgent:
    """Speaks the agent protocol: registers, polls its commands, reports started and finished tasks."""

    def __init__(self, name: str, http: httpx.AsyncClient) -> None:
        self.name, self.http = name, http
        self.epoch = ""
        self.seq = 0
        self.runs: dict[int, tuple[float, int]] = {}  # job id -> (when its tasks exit, signal)
        self.ranks: dict[int, list[int]] = {}

    async def register(self) -> None:
        body = {"node": self.name, "address": "127.0.0.1", "cpus": CPUS, "mem_mib": MEM_MIB,
                "gpus": [{"index": i, "model": "sim-gpu"} for i in range(GPUS)]}
        reply = await self.http.post(f"{API_PREFIX}/agents/register", json=body)
        assert reply.status_code == 200, reply.text
        self.epoch = reply.json()["epoch"]

    async def poll(self) -> list[dict]:
        reply = await self.http.get(f"{API_PREFIX}/agents/{self.name}/commands",
                                    params={"after": self.seq, "wait_s": 0}, headers={EPOCH_HEADER: self.epoch})
        assert reply.status_code == 200, reply.text
        commands = reply.json()["commands"]
        if commands:
            self.seq = max(c["seq"] for c in commands)
        return commands

    async def post(self, events: list[dict]) -> None:
        reply = await self.http.post(f"{API_PREFIX}/agents/{self.name}/events", json={"events": events},
                                     headers={EPOCH_HEADER: self.epoch})
        assert reply.status_code == 200, reply.text


async def run_live(workload, tmp_path: Path,  # noqa: C901 (the driver's loop, step by step)
                   services: tuple[SimService, ...] = ()) -> tuple[list[tuple], dict[int, dict]]:
    clock = FakeClock(T0)
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    service = ControllerService(restore_engine(CONFIG, SIMULATED, store, clock(), TENANCY), store, clock)
    app = create_app(service, SECRET)  # the lifespan (the real-time loop) is not started: the test is the loop
    log: list[tuple] = []
    durations: dict[int, float] = {}
    events: list[tuple] = []
    seq = itertools.count()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://controller",
                                 headers={"Authorization": f"Bearer {SECRET}"}) as http:
        agents = {name: FakeAgent(name, http) for name in NODES}
        for agent in agents.values():
            await agent.register()
        for index, (at, body, duration) in enumerate(workload):
            heapq.heappush(events, (at, next(seq), "submit", (index, body, duration)))
        replica_runs = {svc.spec.name: svc.run_s for svc in services}
        for svc in services:
            heapq.heappush(events, (svc.at_s, next(seq), "service", svc))
            if svc.delete_at_s is not None:
                heapq.heappush(events, (svc.delete_at_s, next(seq), "service-delete", svc.spec.name))
        pacer = CyclePacer.simulated()

        async def deliver(now: float) -> None:
            """Agents fetch their commands and act on them, in the order the controller issued them (its
            outbox numbers commands across nodes), so that simultaneous exits are reported in that order."""
            fetched = [(cmd, agent) for agent in agents.values() for cmd in await agent.poll()]
            for cmd, agent in sorted(fetched, key=lambda item: item[0]["seq"]):
                job_id = cmd["job_id"]
                if cmd["kind"] == "launch":
                    log.append((now, "launch", job_id, agent.name, tuple(cmd["node_gpus"])))
                    service_name = cmd["env"].get("CORRAL_SERVICE")
                    run_s = replica_runs[service_name] if service_name else durations[job_id]
                    end = now + run_s if run_s is not None else float("inf")  # a replica may run until stopped
                    agent.runs[job_id] = (end, 0)
                    agent.ranks[job_id] = [t["rank"] for t in cmd["tasks"]]
                    if run_s is not None:
                        heapq.heappush(events, (end, next(seq), "exit", (agent.name, job_id)))
                    await agent.post([{"kind": "started", "job_id": job_id}])
                elif cmd["kind"] == "kill":
                    log.append((now, "kill", job_id, agent.name, cmd["signal"], float(cmd["grace_s"])))
                    if cmd["grace_s"] < 0 or job_id not in agent.runs:
                        continue  # a signal only, or nothing running here
                    at = now + min(STOP_DELAY_S, cmd["grace_s"])
                    if agent.runs[job_id][0] > at:
                        agent.runs[job_id] = (at, cmd["signal"])
                        heapq.heappush(events, (at, next(seq), "exit", (agent.name, job_id)))

        poked = service._wake = asyncio.Event()  # the loop's own event: what poke() sets
        while events:
            now = events[0][0]
            clock.now = now
            while events and events[0][0] == now:
                _, _, kind, payload = heapq.heappop(events)
                if kind == "submit":
                    index, body, duration = payload
                    reply = await http.post(f"{API_PREFIX}/jobs", json=body)
                    assert reply.status_code == 201, reply.text
                    durations[reply.json()["job_id"]] = duration
                elif kind == "exit":
                    name, job_id = payload
                    agent = agents[name]
                    if job_id not in agent.runs or agent.runs[job_id][0] != now:
                        continue  # superseded: the tasks were killed sooner
                    _, sig = agent.runs.pop(job_id)
                    tasks = [{"rank": r, "exit_code": 0, "signal": sig} for r in agent.ranks.pop(job_id)]
                    await agent.post([{"kind": "finished", "job_id": job_id, "tasks": tasks}])
                elif kind == "service":
                    await service.request(ServiceApplied(payload.spec, payload.user))
                    poked.set()
                elif kind == "service-delete":
                    await service.request(ServiceDeleted(payload))
                    poked.set()
                elif kind == "wake" and pacer.rings(payload):
                    poked.set()  # the loop's timer
            # The controller loop: a cycle whenever it was poked, until nothing pokes it at this instant.
            while poked.is_set():
                poked.clear()
                await service.run_cycle()
                pacer.cycle_ran(now, now)
                await deliver(now)
                timer = pacer.sleep(now, service.engine.next_deadline(now))
                if timer is not None:
                    heapq.heappush(events, (timer, next(seq), "wake", timer))
        reply = await http.get(f"{API_PREFIX}/jobs", params={"all": "true"})
        assert reply.status_code == 200, reply.text
        finals = {j["id"]: {"state": j["state"], "start": j["start_time"], "end": j["end_time"],
                            "slices": [(s["node"], tuple(s["gpus"])) for s in j["slices"]],
                            "restarts": j["restart_count"]} for j in reply.json()}
    return log, finals


@pytest.mark.slow  # ~30 s: some 4,000 launches and kills over HTTP
def test_simulator_and_live_controller_make_the_same_decisions(tmp_path: Path) -> None:
    workload = recorded()
    sim_log, sim_finals = run_simulator(workload)
    live_log, live_finals = asyncio.run(run_live(workload, tmp_path))

    # The workload exercises what it claims to.
    states = {f["state"] for f in sim_finals.values()}
    assert len(sim_finals) == len(workload)
    assert {"COMPLETED", "TIMEOUT"} <= states, states
    assert sum(f["restarts"] for f in sim_finals.values()) > 0, "no preemption happened"
    assert any(len(f["slices"]) > 1 for f in sim_finals.values()), "no multi-node gang"

    assert sorted(live_log) == sorted(sim_log)
    assert live_finals == sim_finals


# Two services beside the recorded batch load: one that serves until it is deleted, one whose replicas crash
# every 900 s and come back with their backoff; both in the cohort's queues, preemptible by QOS "high".
SERVICES = (
    SimService(T0 + 100, ServiceSpec(name="api", command=["serve"], replicas=3,
                                     workdir="/srv", gpus_per_node=2, account="a",
                                     queue="qa", qos="normal", min_ready=1), "ua", delete_at_s=T0 + 30_000),
    SimService(T0 + 2_000, ServiceSpec(name="flaky", command=["serve"], replicas=2,
                                       workdir="/srv", gpus_per_node=1, account="b",
                                       queue="qb", qos="normal"), "ub", run_s=900.0, delete_at_s=T0 + 25_000),
)


@pytest.mark.slow  # ~40 s: the replay above, plus the services' replicas
def test_a_replay_with_services_decides_the_same_live_and_simulated(tmp_path: Path) -> None:
    workload = recorded()
    replica_ids: set[int] = set()
    sim_log, sim_finals = run_simulator(workload, SERVICES, replica_ids)
    live_log, live_finals = asyncio.run(run_live(workload, tmp_path, SERVICES))

    replicas = {job_id: f for job_id, f in sim_finals.items() if job_id in replica_ids}
    assert len(sim_finals) == len(workload) + len(replicas) and len(replicas) >= 5, "replicas ended (deleted)"
    assert all(f["state"] == "CANCELLED" for f in replicas.values()), replicas
    assert sum(f["restarts"] for f in replicas.values()) > 3, "the flaky service's replicas restarted"
    assert sorted(live_log) == sorted(sim_log)
    assert live_finals == sim_finals
