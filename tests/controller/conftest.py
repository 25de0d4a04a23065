"""A controller app in this process over a real SQLite store, its scheduling loop not started: the
tests see exactly the jobs they stored."""
from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

import httpx
import pytest

from corral.controller.app import create_app
from corral.controller.restore import restore_engine
from corral.controller.service import ControllerService
from corral.core.model import Gpu, NodeSlice, Request
from corral.engine.config import LIVE, EngineConfig, PartitionConfig
from corral.engine.records import Job, JobSpec, JobState, Node
from corral.protocol import API_PREFIX
from corral.store import Store

SECRET = "lists-secret"
T0 = 1_750_000_000.0
CONFIG = EngineConfig(partitions=(PartitionConfig("gpu", default=True), PartitionConfig("debug")))


def job(job_id: int, state: JobState = JobState.PENDING, *, user: str = "alice", partition: str = "gpu",
        account: str = "a", array: tuple[int, int] | None = None, reason: str = "Priority",
        name: str = "work") -> Job:
    """A job; `array` is (array job id, task index); running and finished ones hold one GPU of n1."""
    array_job_id, task = array if array else (None, None)
    spec = JobSpec(name=name, user=user, request=Request(gpus_per_node=1, partition=partition), argv=("true",),
                   account=account, array_job_id=array_job_id, array_task_id=task,
                   array_indices="0-9" if array else "")
    record = Job(id=job_id, spec=spec, submit_time=T0 + job_id, state=state,
                 reason=reason if state is JobState.PENDING else "None")
    if state is not JobState.PENDING:
        record.start_time = T0 + job_id + 1
        record.slices = (NodeSlice("n1", (job_id % 8,), 1, 0),)
    if state.terminal:
        record.end_time = T0 + job_id + 2
    return record


def node(name: str) -> Node:
    return Node(name, tuple(Gpu(i, "sim") for i in range(8)), 64, 512_000, up=True,
                partitions=frozenset({"gpu", "debug"}))


class Api:
    """Requests to the app, one event loop each (the app keeps no loop-bound state between them)."""

    def __init__(self, app) -> None:
        self.app = app

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        async def call() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                         base_url=f"http://controller{API_PREFIX}",
                                         headers={"Authorization": f"Bearer {SECRET}"}) as client:
                return await client.request(method, path, **kwargs)

        return asyncio.run(call())

    def get(self, path: str, **kwargs) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs) -> httpx.Response:
        return self.request("POST", path, **kwargs)


def open_api(directory: Path, jobs: Iterable[Job]) -> Api:
    store = Store.open(f"sqlite:///{directory / 'corral.db'}")
    store.save(jobs=list(jobs), nodes=[node("n1")])
    service = ControllerService(restore_engine(CONFIG, LIVE, store, T0 + 100), store, clock=lambda: T0 + 100)
    return Api(create_app(service, SECRET))


@pytest.fixture
def open_controller(tmp_path):
    return lambda jobs: open_api(tmp_path, jobs)
