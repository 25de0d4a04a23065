"""A stand-in for the controller's user API: the endpoints the CLI calls, over canned data, served
for real on 127.0.0.1 by uvicorn in a thread. Bodies are validated with the real schemas."""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field

import uvicorn
from fastapi import Depends, FastAPI, Header, HTTPException, Request

from corral.api.schemas import GpuOut, JobOut, JobSubmit, NodeOut, PartitionOut, SliceOut, SubmitReply
from corral.api.tenancy import (
    AccountSpec,
    FairShareOut,
    PriorityOut,
    QosSpec,
    QueueOut,
    QueueSpec,
    ReservationOut,
    ReservationSpec,
    TenancySpec,
    UserSpec,
)
from corral.hostlist import expand
from corral.jobref import JobIdError, parse_job_list
from corral.jobscript.specs import parse_array_spec
from corral.protocol import API_PREFIX

from .standin_services import add_service_routes

SECRET = "standin-secret"
T0 = 1_700_000_000.0  # a fixed "now"-ish epoch for canned jobs
ACTIVE = ("PENDING", "RUNNING", "COMPLETING")


def make_job(job_id: int, **overrides) -> dict:
    job = {
        "id": job_id, "name": f"job{job_id}", "user": "alice", "state": "PENDING", "reason": "Priority",
        "partition": "gpu", "priority": 0, "submit_time": T0, "start_time": None, "end_time": None,
        "estimated_start": None, "time_limit_s": 3600, "elapsed_s": 0.0, "num_nodes": 1, "tasks_per_node": 1,
        "num_tasks": 1, "gpus_per_node": 0, "cpus_per_task": 1, "mem_per_node_mib": 0, "total_gpus": 0,
        "nodelist": "", "slices": [], "exit_code": 0, "exit_signal": 0, "gpu_seconds": 0.0, "workdir": "/home/alice",
        "output": "slurm-%j.out", "error": None, "restart_count": 0,
    }
    job.update(overrides)
    return JobOut.model_validate(job).model_dump()


def canned_jobs() -> dict[int, dict]:
    running = make_job(
        1, name="train", state="RUNNING", reason="None", start_time=T0 + 10, elapsed_s=303.0, num_nodes=2,
        gpus_per_node=4, total_gpus=8, nodelist="node[1-2]", mem_per_node_mib=16384, gpu_seconds=2424.0,
        slices=[SliceOut(node=n, gpus=[0, 1, 2, 3], cpus=8, mem_mib=16384).model_dump() for n in ("node1", "node2")],
    )
    waiting = make_job(2, name="big", user="bob", reason="Resources", estimated_start=T0 + 3600, total_gpus=16)
    done = make_job(3, name="old", state="COMPLETED", reason="None", start_time=T0 - 7200, end_time=T0 - 3600,
                    elapsed_s=3600.0, nodelist="node1", total_gpus=1, gpu_seconds=3600.0)
    failed = make_job(4, name="crash", user="bob", state="FAILED", reason="NonZeroExitCode", start_time=T0 - 600,
                      end_time=T0 - 300, elapsed_s=300.0, nodelist="node2", exit_code=137, exit_signal=9)
    return {job["id"]: job for job in (running, waiting, done, failed)}


def canned_nodes() -> list[dict]:
    def gpus(alloc_to):
        return [GpuOut(index=i, model="sim-gpu", memory_mib=81920, domain="nvl0", allocated_to=alloc_to).model_dump()
                for i in range(4)]

    return [
        NodeOut(name="node1", state="allocated", address="127.0.0.1", partitions=["gpu"], cpus=16, cpus_alloc=8,
                mem_mib=65536, mem_alloc_mib=16384, gpus=gpus(1), gpus_alloc=4, drain_reason="",
                last_seen=T0, cgroups="cgroup v2 at /sys/fs/cgroup/corral-node1", features=["ib", "nvme"]).model_dump(),
        NodeOut(name="node2", state="drained", address="127.0.0.1", partitions=["gpu", "debug"], cpus=16,
                cpus_alloc=0, mem_mib=65536, mem_alloc_mib=0, gpus=[], gpus_alloc=0, drain_reason="bad fan",
                last_seen=T0, run_as_user=False, agent_user="bob",
                cgroups="no cgroup v2: /sys/fs/cgroup/corral-node2 is not on a cgroup v2 file system").model_dump(),
    ]


def canned_tenancy() -> dict:
    return TenancySpec(
        accounts=[AccountSpec(name="physics", shares=3), AccountSpec(name="hep", parent="physics"),
                  AccountSpec(name="bio")],
        users=[UserSpec(name="alice", accounts=["hep", "bio"]), UserSpec(name="bob", accounts=["bio"])],
        qos=[QosSpec(name="normal"), QosSpec(name="high", priority=100, preempts=["normal"], grace_s=120.0)],
        queues=[QueueSpec(name="hep-q", cohort="all", accounts=["hep"], nominal={"gpu": 8, "mem_mib": 65536},
                          borrowing_limit={"gpu": 4})],
    ).model_dump()


def canned_priorities() -> list[dict]:
    return [
        PriorityOut(job_id=2, user="bob", account="bio", partition="gpu", qos="high", priority=10450, age=250,
                    fairshare=9000, job_size=100, partition_factor=0, qos_factor=1000, nice=0).model_dump(),
        PriorityOut(job_id=7, user="alice", account="hep", partition="gpu", qos="normal", priority=3100, age=1000,
                    fairshare=2100, job_size=0, partition_factor=0, qos_factor=0, nice=0).model_dump(),
    ]


def canned_fairshare() -> list[dict]:
    return [
        FairShareOut(account="physics", parent=None, shares=3, norm_shares=0.75, raw_usage=7200.4, norm_usage=0.9,
                     fairshare=0.25).model_dump(),
        FairShareOut(account="hep", parent="physics", shares=1, norm_shares=0.75, raw_usage=7200.4, norm_usage=0.9,
                     fairshare=0.25).model_dump(),
        FairShareOut(account="bio", parent=None, shares=1, norm_shares=0.25, raw_usage=800.0, norm_usage=0.1,
                     fairshare=0.8125).model_dump(),
    ]


def canned_queues() -> list[dict]:
    return [
        QueueOut(name="hep-q", cohort="all", nominal={"gpu": 8, "mem_mib": 65536},
                 usage={"mem_mib": 131072, "gpu": 12}, borrowing=True, pending_jobs=3, running_jobs=2).model_dump(),
        QueueOut(name="solo", cohort=None, nominal={}, usage={}, borrowing=False, pending_jobs=0,
                 running_jobs=0).model_dump(),
    ]


def canned_reservations() -> dict[str, dict]:
    maint = ReservationOut(name="maint", start=T0 + 3600, end=T0 + 7200, nodes="node[1-2]", maintenance=True,
                           node_names=["node1", "node2"], active=False)
    return {"maint": maint.model_dump()}


@dataclass
class StandinState:
    jobs: dict[int, dict] = field(default_factory=canned_jobs)
    nodes: list[dict] = field(default_factory=canned_nodes)
    submissions: list[dict] = field(default_factory=list)
    queries: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (path, query params)
    actions: list[tuple[str, int]] = field(default_factory=list)  # (requeue|hold|release, job id)
    tenancy: dict = field(default_factory=canned_tenancy)
    tenancy_puts: list[dict] = field(default_factory=list)
    reservations: dict[str, dict] = field(default_factory=canned_reservations)
    reservation_posts: list[dict] = field(default_factory=list)
    services: dict[str, dict] = field(default_factory=dict)  # ServiceOut dicts (tests/cli/standin_services.py)
    service_posts: list[dict] = field(default_factory=list)

    def reset(self) -> None:
        self.__init__()


def _check_auth(authorization: str | None = Header(None)) -> None:
    if authorization != f"Bearer {SECRET}":
        raise HTTPException(401, "missing or wrong bearer token")


def make_app(state: StandinState) -> FastAPI:
    app = FastAPI()

    @app.middleware("http")
    async def record(request: Request, call_next):
        state.queries.append((request.url.path.removeprefix(API_PREFIX), dict(request.query_params)))
        return await call_next(request)

    @app.get(API_PREFIX + "/health")
    def health() -> dict:
        return {"status": "ok", "cluster": "standin"}

    _add_job_routes(app, state)
    _add_job_action_routes(app, state)
    _add_cluster_routes(app, state)
    _add_policy_routes(app, state)
    _add_reservation_routes(app, state)
    add_service_routes(app, state, Depends(_check_auth))
    return app


def _add_job_routes(app: FastAPI, state: StandinState) -> None:
    authed = [Depends(_check_auth)]

    @app.post(API_PREFIX + "/jobs", status_code=201, dependencies=authed)
    def submit(body: JobSubmit) -> SubmitReply:
        if body.partition not in (None, "gpu", "debug"):
            raise HTTPException(422, f"unknown partition '{body.partition}'")
        if (body.gpus_per_node or 0) > 4:
            raise HTTPException(422, f"no node has {body.gpus_per_node} GPUs (the most is 4)")
        state.submissions.append(body.model_dump(exclude_unset=True))
        if body.array:
            return _submit_array(state, body)
        job_id = max(state.jobs) + 1
        state.jobs[job_id] = make_job(job_id, name=body.name or "sbatch", user=body.user)
        return SubmitReply(job_id=job_id)

    @app.get(API_PREFIX + "/jobs", dependencies=authed)
    def jobs(states: str | None = None, user: str | None = None, all: bool = False,
             ids: str | None = None) -> list[dict]:
        wanted = states.split(",") if states else (None if all else ACTIVE)
        named = _named(state, ids)
        return [j for j in state.jobs.values()
                if (wanted is None or j["state"] in wanted) and (user is None or j["user"] == user)
                and (named is None or j["id"] in named)]

    @app.get(API_PREFIX + "/jobs/{job_id}", dependencies=authed)
    def job(job_id: int) -> dict:
        if job_id not in state.jobs:
            raise HTTPException(404, f"job {job_id} not found")
        return state.jobs[job_id]

    @app.post(API_PREFIX + "/jobs/{job_id}/cancel", dependencies=authed)
    def cancel(job_id: int) -> dict:
        found = job(job_id)
        if found["state"] not in ACTIVE:
            raise HTTPException(409, f"job {job_id} already ended ({found['state']})")
        if found["state"] == "PENDING":
            found.update(state="CANCELLED", reason="None", end_time=time.time())
        else:  # as corral's controller: the tasks get SIGTERM, the job ends once they are gone
            found.update(state="COMPLETING")
        return found


def _named(state: StandinState, ids: str | None) -> set[int] | None:
    """The controller's reading of `ids=` (corral.engine.job_refs): an array's id names every task."""
    if not ids:
        return None
    try:
        refs = parse_job_list(ids, task_lists=True)
    except JobIdError as exc:
        raise HTTPException(422, f"ids: {exc}") from None
    named = set()
    for ref in refs:
        job = state.jobs.get(ref.job_id)
        if job is None:
            continue
        if job.get("array_job_id") == job["id"]:
            tasks = [j for j in state.jobs.values() if j.get("array_job_id") == job["id"]]
            named.update(j["id"] for j in tasks if ref.tasks is None or ref.has_task(j["array_task_id"]))
        elif ref.tasks is None:
            named.add(job["id"])
    return named


def _submit_array(state: StandinState, body: JobSubmit) -> SubmitReply:
    """One job per task, ids in a row; the array job id is the first task's id, as in Slurm."""
    spec = parse_array_spec(body.array or "")
    first_id = max(state.jobs) + 1
    for offset, index in enumerate(spec.indices()):
        state.jobs[first_id + offset] = make_job(first_id + offset, name=body.name or "sbatch", user=body.user,
                                                 array_job_id=first_id, array_task_id=index,
                                                 array_throttle=spec.throttle)
    return SubmitReply(job_id=first_id, task_ids=list(range(first_id, first_id + len(spec.indices()))))


def _add_job_action_routes(app: FastAPI, state: StandinState) -> None:
    authed = [Depends(_check_auth)]

    def found(job_id: int, action: str) -> dict:
        state.actions.append((action, job_id))
        if job_id not in state.jobs:
            raise HTTPException(404, f"job {job_id} not found")
        return state.jobs[job_id]

    @app.post(API_PREFIX + "/jobs/{job_id}/requeue", dependencies=authed)
    def requeue(job_id: int) -> dict:
        job = found(job_id, "requeue")
        if job["state"] == "PENDING":
            raise HTTPException(409, f"job {job_id} is pending; only running or finished jobs can be requeued")
        if not job["requeue"]:
            raise HTTPException(409, f"job {job_id} was submitted with --no-requeue")
        job.update(state="PENDING", reason="BeginTime", nodelist="", restart_count=job["restart_count"] + 1)
        job["history"] = [*job["history"], {"t": T0, "event": "requeued", "reason": "by request"}]
        return job

    @app.post(API_PREFIX + "/jobs/{job_id}/hold", dependencies=authed)
    def hold(job_id: int) -> dict:
        job = found(job_id, "hold")
        if job["state"] != "PENDING":
            raise HTTPException(409, f"job {job_id} is {job['state']}; only pending jobs can be held")
        job.update(held=True, reason="JobHeldUser", priority=0)
        return job

    @app.post(API_PREFIX + "/jobs/{job_id}/release", dependencies=authed)
    def release(job_id: int) -> dict:
        job = found(job_id, "release")
        if not job["held"]:
            raise HTTPException(409, f"job {job_id} is not held")
        job.update(held=False, reason="Priority")
        return job


def _add_policy_routes(app: FastAPI, state: StandinState) -> None:
    authed = [Depends(_check_auth)]

    @app.get(API_PREFIX + "/priority", dependencies=authed)
    def priority() -> list[dict]:
        return canned_priorities()

    @app.get(API_PREFIX + "/fairshare", dependencies=authed)
    def fairshare() -> list[dict]:
        return canned_fairshare()

    @app.get(API_PREFIX + "/queues", dependencies=authed)
    def queues() -> list[dict]:
        return canned_queues()

    @app.get(API_PREFIX + "/tenancy", dependencies=authed)
    def tenancy() -> dict:
        return state.tenancy

    @app.put(API_PREFIX + "/tenancy", dependencies=authed)
    def put_tenancy(request_body: dict) -> dict:
        state.tenancy_puts.append(request_body)
        try:
            spec = TenancySpec.model_validate(request_body)
        except ValueError as exc:  # the controller's 422: one readable line
            raise HTTPException(422, str(exc.errors()[0]["msg"])) from None
        state.tenancy = spec.model_dump()
        return state.tenancy


def _add_reservation_routes(app: FastAPI, state: StandinState) -> None:
    authed = [Depends(_check_auth)]

    @app.get(API_PREFIX + "/reservations", dependencies=authed)
    def reservations() -> list[dict]:
        return list(state.reservations.values())

    @app.post(API_PREFIX + "/reservations", status_code=201, dependencies=authed)
    def create(body: ReservationSpec) -> dict:
        state.reservation_posts.append(body.model_dump(exclude_unset=True))
        if body.name in state.reservations:
            raise HTTPException(409, f"reservation '{body.name}' already exists")
        names = expand(body.nodes) if body.nodes else ["node1"]
        created = ReservationOut(**body.model_dump(), node_names=names, active=body.start <= time.time())
        state.reservations[body.name] = created.model_dump()
        return state.reservations[body.name]

    @app.delete(API_PREFIX + "/reservations/{name}", status_code=204, dependencies=authed)
    def delete(name: str) -> None:
        if state.reservations.pop(name, None) is None:
            raise HTTPException(404, f"reservation '{name}' not found")


def _add_cluster_routes(app: FastAPI, state: StandinState) -> None:
    authed = [Depends(_check_auth)]

    @app.get(API_PREFIX + "/nodes", dependencies=authed)
    def nodes() -> list[dict]:
        return state.nodes

    @app.get(API_PREFIX + "/partitions", dependencies=authed)
    def partitions() -> list[dict]:
        return [PartitionOut(name="gpu", default=True, up=True, max_time_s=86400, default_time_s=3600,
                             nodes=["node1", "node2"]).model_dump()]

    @app.get(API_PREFIX + "/accounting", dependencies=authed)
    def accounting(user: str | None = None, states: str | None = None, since: float | None = None,
                   until: float | None = None, ids: str | None = None) -> list[dict]:
        wanted_ids = _named(state, ids)
        return [j for j in state.jobs.values()
                if (user is None or j["user"] == user) and (wanted_ids is None or j["id"] in wanted_ids)
                and (states is None or j["state"] in states.split(","))]


class ServerThread:
    """uvicorn serving an app on a socket bound here (port 0: no race for a free port)."""

    def __init__(self, app: FastAPI, lifespan: str = "off") -> None:
        """lifespan="on": the app's start-up and shutdown run (the controller's loop, its auth socket)."""
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", lifespan=lifespan)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("stand-in server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
