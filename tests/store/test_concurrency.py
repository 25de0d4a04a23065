"""Readers see only whole saves while a writer saves (both databases). SQLite in WAL mode:
readers never wait for the writer, and a second writer waits for the first instead of failing."""
from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from corral.engine.records import Job, JobState
from corral.store import Store
from tests.store.factories import pending_job
from tests.store.pg import fresh_pg_schema

JOBS_PER_SAVE = 50
SAVES = 60


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "sqlite-only.db"


@pytest.fixture
def writer(db_url: str) -> Iterator[Store]:
    with Store.open(db_url) as store:
        store.save(jobs=_generation(0))
        yield store


@pytest.fixture
def reader(writer: Store, db_url: str) -> Iterator[Store]:
    """A second store on the same database, as `corral acct` in another process would open it."""
    with Store.open(db_url) as store:
        yield store


@pytest.fixture
def sqlite_writer(db_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{db_path}") as store:
        store.save(jobs=_generation(0))
        yield store


@pytest.fixture
def sqlite_reader(sqlite_writer: Store, db_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{db_path}") as store:
        yield store


def _generation(n: int) -> list[Job]:
    return [replace(pending_job(i), restart_count=n) for i in range(1, JOBS_PER_SAVE + 1)]


def test_reader_sees_only_whole_saves_while_writer_saves(writer: Store, reader: Store) -> None:
    errors: list[BaseException] = []
    done = threading.Event()

    def write() -> None:
        try:
            for n in range(1, SAVES + 1):
                writer.save(jobs=_generation(n))
                time.sleep(0.001)  # let the reader in between saves, whatever the GIL does
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=write)
    thread.start()
    seen: list[int] = []
    while not done.is_set():
        generations = {job.restart_count for job in reader.query_jobs()}
        assert len(generations) == 1, f"a read saw a partial save: {sorted(generations)}"
        seen.append(generations.pop())
    thread.join()

    assert not errors, errors
    assert seen == sorted(seen), "reads went back in time"
    assert len(set(seen)) > 1, "no read overlapped the writes: the test proved nothing"
    assert {job.restart_count for job in reader.query_jobs()} == {SAVES}


def _hold_write_lock(db_path: Path) -> sqlite3.Connection:
    """Another process's open write transaction: an uncommitted update of job 1."""
    other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("UPDATE jobs SET state = 'FAILED' WHERE id = 1")
    return other


def test_sqlite_reader_does_not_wait_for_an_open_write_transaction(
    sqlite_writer: Store, sqlite_reader: Store, db_path: Path
) -> None:
    reader = sqlite_reader
    other = _hold_write_lock(db_path)
    try:
        started = time.monotonic()
        assert reader.get_job(1).state is JobState.PENDING  # the last committed state
        assert len(reader.load_active_jobs()) == JOBS_PER_SAVE
        assert time.monotonic() - started < 1.0  # busy_timeout is 5 s: we did not wait on a lock
        other.execute("COMMIT")
        assert reader.get_job(1).state is JobState.FAILED
    finally:
        other.close()


def test_sqlite_second_writer_waits_for_the_first(sqlite_writer: Store, db_path: Path) -> None:
    writer = sqlite_writer
    other = _hold_write_lock(db_path)
    hold_s = 0.3
    release = threading.Timer(hold_s, lambda: (other.execute("COMMIT"), other.close()))
    release.start()
    try:
        started = time.monotonic()
        writer.save(jobs=_generation(7))  # waits on busy_timeout, then succeeds
        waited_s = time.monotonic() - started
    finally:
        release.join()
    assert waited_s >= hold_s * 0.8
    assert {job.restart_count for job in writer.query_jobs()} == {7}


def test_sqlite_try_write_does_not_wait_for_another_writer(sqlite_writer: Store, db_path: Path) -> None:
    other = _hold_write_lock(db_path)
    try:
        started = time.monotonic()
        assert not sqlite_writer.try_write(sqlite_writer.encode(jobs=_generation(3), meta={"k": "v"}))
        assert time.monotonic() - started < 1.0  # busy_timeout is 5 s: it did not wait
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert {job.restart_count for job in sqlite_writer.query_jobs()} == {0} and sqlite_writer.get_meta("k") is None
    # With the lock free the write is done at once, and the connection waits for locks again afterwards.
    assert sqlite_writer.try_write(sqlite_writer.encode(jobs=_generation(4)))
    assert {job.restart_count for job in sqlite_writer.query_jobs()} == {4}
    with sqlite_writer.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000


@pytest.mark.postgres
def test_postgresql_try_write_leaves_every_write_to_the_caller_thread(pg_server_url: str) -> None:
    with fresh_pg_schema(pg_server_url) as url, Store.open(url) as store:
        assert not store.try_write(store.encode(jobs=_generation(1)))
        assert store.query_jobs() == []
