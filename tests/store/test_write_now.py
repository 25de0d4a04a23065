"""The event loop's SQLite writes (Store.try_write, AuthStore.try_audit), which run on the DBAPI connection
without SQLAlchemy: whole or nothing, fenced, translated errors, never a busy wait, and the pooled
connection left as every other caller expects it (waiting for locks, no transaction open)."""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from corral.store import Store, StoreError
from corral.store.auth_store import AuditEntry, AuthStore
from corral.store.database import SQLITE_BUSY_TIMEOUT_MS
from corral.store.lease import LeaseLost, Leases
from corral.store.store import Changes
from tests.store.factories import full_job, pending_job
from tests.store.test_lease import holder
from tests.store.test_services_store import full_service


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "write-now.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{db_path}") as opened:
        yield opened


def _hold_write_lock(db_path: Path) -> sqlite3.Connection:
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def _pool_is_clean(store: Store) -> None:
    """Every pooled connection waits for locks again and has no transaction open."""
    pooled = store.engine.raw_connection()
    try:
        sqlite = pooled.driver_connection
        assert isinstance(sqlite, sqlite3.Connection) and not sqlite.in_transaction
        assert sqlite.execute("PRAGMA busy_timeout").fetchone()[0] == SQLITE_BUSY_TIMEOUT_MS
    finally:
        pooled.close()


def test_try_write_writes_every_table_and_deletes_forgotten_services(store: Store) -> None:
    web, old = full_service("web"), full_service("old")
    store.save(services=[web, old])
    changes = store.encode(jobs=[full_job(1), pending_job(2)], meta={"k": "v"}, services=[replace(web, revision=9)],
                           services_forgotten=["old"])
    assert store.try_write(changes)
    assert store.get_job(1) == full_job(1) and store.get_job(2) == pending_job(2)
    assert store.get_meta("k") == "v"
    assert [(s.spec.name, s.revision) for s in store.load_services()] == [("web", 9)]
    _pool_is_clean(store)


def test_a_failing_try_write_writes_nothing_and_says_why(store: Store) -> None:
    store.save(jobs=[pending_job(1)])
    good = store.encode(jobs=[replace(pending_job(1), restart_count=5)], meta={"k": "v"})
    broken_row = tuple(None for _ in good.jobs[0])  # the id and the NOT NULL columns missing
    changes = Changes(jobs=[*good.jobs, broken_row], meta=good.meta)
    with pytest.raises(StoreError, match="saving failed: NOT NULL constraint failed"):
        store.try_write(changes)
    assert store.get_job(1) == pending_job(1) and store.get_meta("k") is None, "nothing of it was written"
    _pool_is_clean(store)
    assert store.try_write(good)  # the connection is usable again
    assert store.get_job(1).restart_count == 5


def test_try_write_checks_the_fence_in_its_transaction(store: Store) -> None:
    leases = Leases(store.engine)
    store.fence(leases.acquire(holder("a"), 60.0).epoch)
    assert store.try_write(store.encode(jobs=[pending_job(1)]))
    leases.release(1)
    assert leases.acquire(holder("b"), 60.0).epoch == 2
    with pytest.raises(LeaseLost, match=r"epoch 2 \(http://b:6817\)"):
        store.try_write(store.encode(jobs=[pending_job(2)], meta={"k": "v"}))
    assert store.get_job(2) is None and store.get_meta("k") is None
    _pool_is_clean(store)


def test_try_audit_appends_at_once_or_leaves_it_to_the_caller(store: Store, db_path: Path) -> None:
    log = AuthStore(store.engine)
    entries = [AuditEntry(float(t), f"user{t}", "socket", "submit", f"job {t}", "allowed", "") for t in range(1, 4)]
    assert log.try_audit(*entries[:2])
    other = _hold_write_lock(db_path)
    try:
        started = time.monotonic()
        assert not log.try_audit(entries[2])
        assert time.monotonic() - started < 1.0  # busy_timeout is 5 s: it did not wait
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert log.audit_entries() == entries[:2]
    _pool_is_clean(store)
    assert log.try_audit(entries[2])
    assert log.audit_entries() == entries
