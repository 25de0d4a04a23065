"""Engines for the two supported databases: SQLite (one file, the default) and PostgreSQL."""
from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError

from corral.store.codec import json_dumps
from corral.store.errors import StoreError

# Execution option naming the SQLite BEGIN mode ("IMMEDIATE" for writers, see sqlite_writer).
SQLITE_BEGIN_OPTION = "corral_sqlite_begin"

# Applied to every SQLite connection. WAL lets readers run while the controller writes;
# synchronous=NORMAL is durable across process crashes (only an OS crash can lose the last
# commits) and far faster than FULL; busy_timeout makes a second writer wait instead of failing.
SQLITE_BUSY_TIMEOUT_MS = 5000
SQLITE_PRAGMAS = (
    "journal_mode=WAL",
    "synchronous=NORMAL",
    "foreign_keys=ON",
    f"busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
)

POSTGRES_CONNECT_TIMEOUT_S = 10

_SUPPORTED = "sqlite:///PATH or postgresql+psycopg://USER@HOST[:PORT]/DATABASE"


def safe_url(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def parse_url(url: str) -> URL:
    """Check the scheme and pick the driver; raise StoreError for anything unsupported."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StoreError(f"not a database URL: {url!r} (use {_SUPPORTED})") from exc
    # From the URL text: asking SQLAlchemy for the backend would import (or fail to find) it.
    if parsed.drivername in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg"):
        return parsed
    if parsed.drivername == "postgresql":
        # Plain postgresql:// means psycopg2 to SQLAlchemy; psycopg 3 is the driver we ship.
        return parsed.set(drivername="postgresql+psycopg")
    raise StoreError(f"unsupported database URL {safe_url(parsed)!r}: use {_SUPPORTED}")


def make_engine(url: str) -> Engine:
    parsed = parse_url(url)
    if parsed.drivername.startswith("sqlite"):
        return _sqlite_engine(parsed)
    return _postgres_engine(parsed)


def sqlite_writer(engine: Engine) -> Engine:
    """The engine whose transactions start with BEGIN IMMEDIATE on SQLite (no-op elsewhere).

    Taking the write lock up front means a writer waits (busy_timeout) for another writer
    instead of failing with SQLITE_BUSY when it upgrades from a read lock mid-transaction.
    """
    return engine.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})


def try_sqlite_transaction(engine: Engine, body: Callable[[sqlite3.Connection], None]) -> bool:
    """Run `body` in one SQLite transaction begun IMMEDIATE, committed when it returns, if the write lock is
    free now; False, with nothing done, when another connection holds it (no busy wait). For an event loop's
    writes: straight on a pooled DBAPI connection, without SQLAlchemy's connection, its transaction events
    and its statement dispatch (together half the CPU of a one-row write). sqlite3's errors go through as
    they are (errors.translated turns them into StoreError)."""
    pooled = engine.raw_connection()
    try:
        sqlite = pooled.driver_connection
        assert isinstance(sqlite, sqlite3.Connection)
        sqlite.execute("PRAGMA busy_timeout=0")
        try:
            return _transaction_now(sqlite, body)
        finally:
            sqlite.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    finally:
        pooled.close()


def _transaction_now(sqlite: sqlite3.Connection, body: Callable[[sqlite3.Connection], None]) -> bool:
    """try_sqlite_transaction on a connection whose busy timeout is 0: SQLITE_BUSY at any statement (the
    BEGIN, in practice) rolls back and answers False."""
    try:
        sqlite.execute("BEGIN IMMEDIATE")
        body(sqlite)
        sqlite.execute("COMMIT")
    except BaseException as exc:
        if sqlite.in_transaction:
            sqlite.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
            return False  # extended codes too; nothing written
        raise
    return True


def _database_file(url: URL) -> Path | None:
    """The SQLite file, or None for an in-memory or URI-style database."""
    if not url.database or url.database == ":memory:" or "uri" in url.query:
        return None
    return Path(url.database).expanduser()


def _sqlite_engine(url: URL) -> Engine:
    if (path := _database_file(url)) is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the directory for {safe_url(url)}: {exc}") from exc
    engine = create_engine(url, json_serializer=json_dumps)
    event.listen(engine, "connect", _on_sqlite_connect)
    event.listen(engine, "begin", _on_sqlite_begin)
    return engine


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Take transaction control away from the sqlite3 module: in its legacy mode it does not
    # BEGIN before DDL, so a migration would not be atomic. _on_sqlite_begin emits BEGIN instead.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(f"PRAGMA {pragma}")
    finally:
        cursor.close()


def _on_sqlite_begin(connection: Connection) -> None:
    mode = connection.get_execution_options().get(SQLITE_BEGIN_OPTION, "DEFERRED")
    connection.exec_driver_sql(f"BEGIN {mode}")


def _postgres_engine(url: URL) -> Engine:
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        # An unreachable host must fail open() in seconds, not hang the controller.
        connect_args["connect_timeout"] = POSTGRES_CONNECT_TIMEOUT_S
    # pre_ping: the controller outlives server restarts; a stale pooled connection is
    # replaced on checkout instead of failing the next save.
    return create_engine(url, json_serializer=json_dumps, pool_pre_ping=True, connect_args=connect_args)
