"""Opening and closing: schema migrations, durability, SQLite settings, errors."""
from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import delete, inspect

from corral.store import Store, StoreError, migrate
from corral.store.schema import META, Base
from corral.store.store import CREATED_AT_KEY
from tests.store.factories import full_job, full_node
from tests.store.pg import fresh_pg_schema


def _revision(store: Store) -> str | None:
    with store.engine.connect() as connection:
        return migrate.current_revision(connection)


def test_new_database_is_at_head(store: Store) -> None:
    assert migrate.head_revision() == "0008"
    assert _revision(store) == migrate.head_revision()
    tables = set(inspect(store.engine).get_table_names())
    assert {"jobs", "nodes", "cluster_meta", "alembic_version", "leader_lease", "controllers"} <= tables


# SQLAlchemy reflects no expression index from SQLite (PostgreSQL's is compared; both are checked below).
@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index ix_jobs_span")
@pytest.mark.filterwarnings("ignore:autogenerate skipping metadata-specified expression-based index 'ix_jobs_span'")
def test_migrated_schema_matches_models(store: Store) -> None:
    # The hand-written migrations and schema.py must describe the same tables, types and indexes.
    with store.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_a_window_reads_the_longest_span_through_its_index(store: Store) -> None:
    """ix_jobs_span exists on every dialect, and the longest span is read from it, not from the table."""
    from sqlalchemy import text

    from corral.store.store import _LONGEST_SPAN

    sql = str(_LONGEST_SPAN.compile(store.engine, compile_kwargs={"literal_binds": True}))
    with store.engine.connect() as connection:
        if store.engine.dialect.name == "sqlite":
            plan = " ".join(str(row[-1]) for row in connection.execute(text(f"EXPLAIN QUERY PLAN {sql}")))
        else:
            plan = " ".join(row[0] for row in connection.execute(text(f"EXPLAIN {sql}")))
    assert "ix_jobs_span" in plan


def test_reopen_keeps_data_and_migrations_are_idempotent(db_url: str) -> None:
    job, node = full_job(12), full_node()
    with Store.open(db_url) as store:
        store.save(jobs=[job], nodes=[node])
        store.set_meta("cluster_name", "alpha")
    for _ in range(2):
        with Store.open(db_url) as store:
            assert _revision(store) == migrate.head_revision()
            assert store.get_job(12) == job
            assert store.load_nodes() == [node]
            assert store.get_meta("cluster_name") == "alpha"
            assert store.max_job_id() == 12


def test_the_database_notes_once_when_the_cluster_began(db_url: str) -> None:
    """Reports over a period (sreport, corral advise) count no time before it."""
    before = time.time()
    with Store.open(db_url) as store:
        created = store.created_at()
        assert created is not None and before <= created <= time.time()
    with Store.open(db_url) as store:
        assert store.created_at() == created  # noted once, not at every start


def test_a_database_from_before_the_note_dates_from_its_first_job(db_url: str) -> None:
    with Store.open(db_url) as store:
        store.save(jobs=[full_job(3), full_job(4)])
        first = min(store.get_job(3).submit_time, store.get_job(4).submit_time)
        with store.engine.begin() as connection:  # as a database of an older corral: no note
            connection.execute(delete(META).where(META.c.key == CREATED_AT_KEY))
        assert store.created_at() is None
    with Store.open(db_url) as store:
        assert store.created_at() == first


def test_downgrade_then_open_upgrades_again(db_url: str) -> None:
    with Store.open(db_url) as store:
        with store.engine.begin() as connection:
            command.downgrade(migrate.alembic_config(connection), "base")
        assert "jobs" not in inspect(store.engine).get_table_names()
    with Store.open(db_url) as store:
        assert _revision(store) == migrate.head_revision()
        store.save(jobs=[full_job(1)])
        assert store.get_job(1) == full_job(1)


def test_sqlite_survives_close_and_reopen_from_another_path_spelling(tmp_path: Path) -> None:
    path = tmp_path / "state" / "nested" / "corral.db"  # parent directories do not exist yet
    jobs = [full_job(i) for i in range(1, 51)]
    with Store.open(f"sqlite:///{path}") as store:
        store.save(jobs=jobs)
    assert path.exists()
    with Store.open(f"sqlite:///{tmp_path}/state/../state/nested/corral.db") as store:
        assert store.query_jobs() == jobs


def test_sqlite_pragmas_on_every_connection(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path}/corral.db") as store:
        # Two connections checked out at once: the pool must open (and configure) a second one.
        with store.engine.connect() as first, store.engine.connect() as second:
            for connection in (first, second):
                pragmas = {
                    name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                    for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
                }
                # synchronous 1 is NORMAL
                assert pragmas == {"journal_mode": "wal", "synchronous": 1, "foreign_keys": 1, "busy_timeout": 5000}


@pytest.mark.postgres
def test_plain_postgresql_scheme_uses_psycopg(pg_server_url: str) -> None:
    with fresh_pg_schema(pg_server_url) as schema_url:
        url = schema_url.replace("postgresql+psycopg://", "postgresql://", 1)
        _open_and_check_driver(url)


def _open_and_check_driver(url: str) -> None:
    with Store.open(url) as store:
        assert store.engine.dialect.driver == "psycopg"
        assert store.url.startswith("postgresql+psycopg://")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://root@localhost/corral", "unsupported database URL"),
        ("nosuchdb://x", "unsupported database URL"),
        ("postgresql+psycopg2://u@localhost/db", "unsupported database URL"),
        ("not a url at all", "not a database URL"),
        ("", "not a database URL"),
    ],
)
def test_bad_url_is_a_store_error(url: str, message: str) -> None:
    with pytest.raises(StoreError, match=message):
        Store.open(url)


def test_unreachable_postgres_is_a_store_error() -> None:
    url = f"postgresql+psycopg://corral:secret@127.0.0.1:{_closed_port()}/corral"
    with pytest.raises(StoreError, match=r"opening postgresql\+psycopg://corral:\*\*\*@127\.0\.0\.1") as info:
        Store.open(url)
    assert "secret" not in str(info.value)


def test_sqlite_file_that_cannot_be_created_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match="cannot create the directory"):
        Store.open(f"sqlite:///{blocker}/sub/corral.db")


def test_sqlite_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "corral.db"
    path.write_bytes(b"this is not an SQLite database, just some bytes" * 100)
    with pytest.raises(StoreError, match="opening sqlite"):
        Store.open(f"sqlite:///{path}")
