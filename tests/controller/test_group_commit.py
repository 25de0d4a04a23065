"""Group commit (controller/service_core.py): submissions that arrive together are committed in one
transaction, each answered only after it; a group whose commit fails acknowledges none of its members.
In process, on real SQLite, counting the store's real transactions."""
from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import event

from corral.api.schemas import JobSubmit
from corral.api.services import ServiceSpec
from corral.controller.restore import restore_engine
from corral.controller.service import ControllerService
from corral.controller.service_core import merged
from corral.controller.writer import StoreUnavailable
from corral.engine.config import LIVE, EngineConfig
from corral.engine.records import Service
from corral.engine.result import Result
from corral.protocol import Registration
from corral.store import Store
from tests.e2e.faults import fill_disk, small_tmpfs

T0 = 1_750_000_000.0
JOB = {"name": "j", "argv": ["true"], "workdir": "/tmp", "user": "u", "uid": 1000, "gpus": 1}


REGISTRATION = {"node": "n1", "address": "127.0.0.1", "cpus": 16, "mem_mib": 64_000,
                "gpus": [{"index": i, "model": "sim-gpu"} for i in range(4)]}


async def service_on(url: str) -> tuple[ControllerService, Store]:
    """A controller on `url` with one node (registered, so that submissions to its partition are taken)."""
    store = Store.open(url)
    service = ControllerService(restore_engine(EngineConfig(), LIVE, store, T0), store, lambda: T0)
    await service.register(Registration(**REGISTRATION))
    return service, store


def count_commits(store: Store) -> list[int]:
    """Every transaction the store commits from now on, on any connection, counted by SQLite itself (the
    event loop's writes run on the DBAPI connection, where SQLAlchemy's events do not see them)."""
    commits = [0]

    def count(statement: str) -> None:
        if statement.strip().upper() == "COMMIT":
            commits[0] += 1

    def trace(dbapi_connection, _record) -> None:
        dbapi_connection.set_trace_callback(count)

    event.listen(store.engine, "connect", trace)
    store.engine.dispose()  # the pooled connections are opened again, each traced
    return commits


def test_a_burst_of_submissions_is_one_commit_and_every_answer_follows_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        service, store = await service_on(f"sqlite:///{tmp_path / 'corral.db'}")
        commits = count_commits(store)
        answered_while_stored: list[bool] = []

        async def submit() -> int:
            job_id, _ = await service.submit(JobSubmit(**JOB))
            answered_while_stored.append(store.get_job(job_id) is not None)  # durable before its answer
            return job_id

        ids = await asyncio.gather(*(submit() for _ in range(50)))
        assert len(set(ids)) == 50
        assert all(answered_while_stored)
        assert commits[0] == 1, f"50 submissions that arrived together took {commits[0]} commits"
        # One more, alone: a group of one.
        await submit()
        assert commits[0] == 2
        await service.stop()
        store.close()

    asyncio.run(scenario())


def test_a_group_whose_commit_fails_acknowledges_none_and_leaves_nothing(tmp_path: Path) -> None:
    async def scenario(database: Path) -> None:
        service, store = await service_on(f"sqlite:///{database / 'corral.db'}")
        first, _ = await service.submit(JobSubmit(**JOB))
        filler = fill_disk(database)
        outcomes = await asyncio.gather(*(service.submit(JobSubmit(**JOB)) for _ in range(20)),
                                        return_exceptions=True)
        assert all(isinstance(outcome, StoreUnavailable) for outcome in outcomes), outcomes
        filler.unlink()
        assert [job.id for job in store.load_active_jobs()] == [first], "a refused submission left a job in the store"
        await service.stop()
        store.close()

    with small_tmpfs(tmp_path / "db") as database:
        asyncio.run(scenario(database))


def service_named(name: str, revision: int) -> Service:
    return Service(spec=ServiceSpec(name=name, command=["serve"], workdir="/srv"), revision=revision,
                   desired_replicas=1, created=0.0)


def test_a_group_commits_what_its_last_stimulus_left_of_a_service_deleted_and_made_again() -> None:
    old_web, new_web, db = service_named("web", 1), service_named("web", 2), service_named("db", 1)
    made_again = merged([Result(services=[old_web, db]), Result(services_forgotten=["web"]),
                         Result(services=[new_web])])
    assert {service.name: service for service in made_again.services} == {"web": new_web, "db": db}
    assert made_again.services_forgotten == []
    deleted = merged([Result(services=[old_web]), Result(services_forgotten=["web"])])
    assert deleted.services == [] and deleted.services_forgotten == ["web"]
