"""The store: the controller's durable copy of jobs and nodes."""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, func, select, union_all
from sqlalchemy.sql import Select

from corral.engine.records import Job, JobState, Node, Service
from corral.store import codec, listed, migrate
from corral.store.database import make_engine, safe_url, sqlite_writer, try_sqlite_transaction
from corral.store.errors import StoreError
from corral.store.errors import translated as _translated
from corral.store.lease import check_fence, check_fence_sqlite
from corral.store.schema import JOBS, META, NODES, SERVICES
from corral.store.upsert import BulkUpsert

ACTIVE_STATES = tuple(state for state in JobState if not state.terminal)
_ACTIVE_VALUES = tuple(state.value for state in ACTIVE_STATES)

R = TypeVar("R")
# Rows fetched at once while streaming: few, so that a row's parsed JSON dies young (see listing.SLICE).
_BATCH_ROWS = 25
# Rows PostgreSQL sends at once to a streamed listing (Store._stream_listed).
_STREAM_ROWS = 100

# The cluster_meta key check_writable() writes.
WRITE_CHECK_KEY = "write_checked_at"
# The cluster_meta key of when the database began (Store.created_at).
CREATED_AT_KEY = "created_at"


@dataclass(frozen=True, slots=True)
class Changes:
    """Rows encoded for one transaction (Store.encode), as the DBAPI takes them."""

    jobs: list[Any] = field(default_factory=list)
    nodes: list[Any] = field(default_factory=list)
    meta: list[Any] = field(default_factory=list)
    services: list[Any] = field(default_factory=list)
    services_forgotten: list[str] = field(default_factory=list)  # deleted services whose rows go

    def __bool__(self) -> bool:
        return bool(self.jobs or self.nodes or self.meta or self.services or self.services_forgotten)


def _unique(records: Iterable[R], key: Callable[[R], Any]) -> list[R]:
    """One record per key, the last one given, in key order.

    Unique, so no statement touches a row twice; sorted, so concurrent writers lock rows in one
    order and cannot deadlock (PostgreSQL).
    """
    by_key = {key(record): record for record in records}
    return [by_key[k] for k in sorted(by_key)]


class Store:
    """Jobs and nodes in SQLite or PostgreSQL. Thread-safe: every call uses its own connection.

    Create with Store.open(url); close() (or use it as a context manager) when done.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = sqlite_writer(engine)
        self._upsert_jobs = BulkUpsert(engine.dialect, JOBS)
        self._upsert_nodes = BulkUpsert(engine.dialect, NODES)
        self._upsert_meta = BulkUpsert(engine.dialect, META)
        self._upsert_services = BulkUpsert(engine.dialect, SERVICES)
        # The leader lease epoch every write must still find (store.lease), or None: writes unfenced
        # (a store outside a controller that takes part in leadership, such as tests and tools).
        self._fence: int | None = None

    @classmethod
    def open(cls, url: str) -> Store:
        """Connect, then create or upgrade the schema. Raises StoreError if that fails."""
        engine = make_engine(url)
        try:
            with _translated(f"opening {safe_url(engine.url)}"):
                migrate.upgrade_to_head(engine)
        except BaseException:
            engine.dispose()
            raise
        store = cls(engine)
        store._note_creation(time.time())
        return store

    def _note_creation(self, now: float) -> None:
        """Note once when this database began: now for a new one; for one from before this was noted, its
        first job's submission (the earliest the cluster is known to have run)."""
        if self.get_meta(CREATED_AT_KEY) is not None:
            return
        first = self._scalar(select(func.min(JOBS.c.submit_time)))
        try:
            self.set_meta(CREATED_AT_KEY, repr(float(first) if first is not None else now))
        except StoreError:
            pass  # a database that takes no writes now (the controller starts degraded): noted at a later start

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return safe_url(self._engine.url)

    @property
    def engine(self) -> Engine:
        return self._engine

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- writes -----------------------------------------------------------------------------

    def fence(self, epoch: int | None) -> None:
        """From now on, every write checks in its transaction that the leader lease is still at `epoch`
        and raises LeaseLost otherwise (lease.NOT_LEADER: no write succeeds); None: no check."""
        self._fence = epoch

    def _check_fence(self, connection: Connection) -> None:
        fence = self._fence
        if fence is not None:
            check_fence(connection, fence)

    def save(self, jobs: Iterable[Job] = (), nodes: Iterable[Node] = (), meta: Mapping[str, str] | None = None,
             services: Iterable[Service] = (), services_forgotten: Iterable[str] = ()) -> None:
        """Insert or update every job, node, service and cluster_meta entry (and delete forgotten services),
        all in one transaction."""
        self.write(self.encode(jobs, nodes, meta, services, services_forgotten))

    def encode(self, jobs: Iterable[Job] = (), nodes: Iterable[Node] = (),
               meta: Mapping[str, str] | None = None, services: Iterable[Service] = (),
               services_forgotten: Iterable[str] = ()) -> Changes:
        """The rows save() would write, encoded now: the records may change once this returns (the
        controller encodes on its event loop and writes from a thread)."""
        return Changes(
            jobs=[self._upsert_jobs.bind(codec.job_to_row(job)) for job in _unique(jobs, attrgetter("id"))],
            nodes=[self._upsert_nodes.bind(codec.node_to_row(node)) for node in _unique(nodes, attrgetter("name"))],
            meta=[self._upsert_meta.bind({"key": key, "value": value}) for key, value in sorted((meta or {}).items())],
            services=[self._upsert_services.bind(codec.service_to_row(service))
                      for service in _unique(services, attrgetter("name"))],
            services_forgotten=sorted(set(services_forgotten)))

    def write(self, changes: Changes) -> None:
        """Write encoded changes in one transaction: all of them, or none (StoreError)."""
        if not changes:
            return
        with _translated("saving"), self._writer.begin() as connection:
            self._check_fence(connection)
            self._apply(connection, changes)

    def _apply(self, connection: Connection, changes: Changes) -> None:
        self._upsert_jobs.execute(connection, changes.jobs)
        self._upsert_nodes.execute(connection, changes.nodes)
        self._upsert_meta.execute(connection, changes.meta)
        self._upsert_services.execute(connection, changes.services)
        if changes.services_forgotten:
            connection.execute(SERVICES.delete().where(SERVICES.c.name.in_(changes.services_forgotten)))

    def try_write(self, changes: Changes) -> bool:
        """write() if that needs no waiting, else write nothing and return False: on SQLite, when another
        connection holds the write lock; on PostgreSQL always (each write is a network round trip). For
        a caller that must not wait (an event loop), and writes in another thread when this says False."""
        if self._engine.dialect.name != "sqlite":
            return False
        if not changes:
            return True
        # The controller's hot path: every submission, every batch of agent events.
        with _translated("saving"):
            return try_sqlite_transaction(self._engine, self._apply_sqlite(changes))

    def _apply_sqlite(self, changes: Changes) -> Callable[[sqlite3.Connection], None]:
        """_apply, with the fence check before it, on SQLite's DBAPI connection."""
        fence = self._fence

        def apply(sqlite: sqlite3.Connection) -> None:
            if fence is not None:
                check_fence_sqlite(sqlite, fence)
            for upsert, rows in ((self._upsert_jobs, changes.jobs), (self._upsert_nodes, changes.nodes),
                                 (self._upsert_meta, changes.meta), (self._upsert_services, changes.services)):
                if rows:
                    sqlite.executemany(upsert.sql, rows)
            if changes.services_forgotten:
                marks = ", ".join("?" * len(changes.services_forgotten))
                sqlite.execute(f"DELETE FROM {SERVICES.name} WHERE name IN ({marks})", changes.services_forgotten)

        return apply

    def check_writable(self, now: float) -> None:
        """Write one small row (the time of this check), or raise StoreError: whether writes work again
        after a failure. A real write, since only that finds a full disk or a lock held by another writer."""
        self.write(self.encode(meta={WRITE_CHECK_KEY: repr(now)}))

    def set_meta(self, key: str, value: str) -> None:
        with _translated(f"setting {key!r}"), self._writer.begin() as connection:
            self._check_fence(connection)
            self._upsert_meta.execute(connection, [self._upsert_meta.bind({"key": key, "value": value})])

    # -- reads ------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        return self._scalar(select(META.c.value).where(META.c.key == key))

    def created_at(self) -> float | None:
        """When the cluster began, as its database noted it (Store.open); None if it was never noted."""
        value = self.get_meta(CREATED_AT_KEY)
        return float(value) if value is not None else None

    def load_nodes(self) -> list[Node]:
        rows = self._rows(select(NODES).order_by(NODES.c.name))
        return [codec.node_from_row(row) for row in rows]

    def load_services(self) -> list[Service]:
        return [codec.service_from_row(row) for row in self._rows(select(SERVICES).order_by(SERVICES.c.name))]

    def load_active_jobs(self) -> list[Job]:
        """Jobs the controller must resume after a restart: pending, running, completing."""
        return self._jobs(select(JOBS).where(JOBS.c.state.in_(_ACTIVE_VALUES)).order_by(JOBS.c.id))

    def get_job(self, job_id: int) -> Job | None:
        jobs = self._jobs(select(JOBS).where(JOBS.c.id == job_id))
        return jobs[0] if jobs else None

    def max_job_id(self) -> int:
        """The highest job id ever saved, 0 for an empty store (the next id is this + 1)."""
        return self._scalar(select(func.coalesce(func.max(JOBS.c.id), 0)))

    def query_jobs(self, **filters: Any) -> list[Job]:
        """Jobs matching every filter of select_jobs, ordered by id (accounting, like sacct)."""
        return list(self.stream_jobs(**filters))

    def stream_jobs(self, **filters: Any) -> Iterator[Job]:
        """query_jobs a job at a time: a reader that lets each job go before taking the next never
        holds the whole list. A time window reads the longest run of any finished job first, in the
        same snapshot (see select_jobs' `longest_span_s`)."""
        if filters.get("start_after") is None:
            return self._stream(select_jobs(**filters))
        return self._stream(lambda connection: select_jobs(
            **filters, longest_span_s=connection.execute(_LONGEST_SPAN).scalar()), snapshot=True)

    def stream_listed_jobs(self, **filters: Any) -> Iterator[Job]:
        """stream_jobs for a listing that encodes each job and lets it go: each job's spec is a read-only view
        (codec.SpecView), not a JobSpec, and shares nothing with the others. Never for jobs that are kept (the
        engine's). On PostgreSQL the server takes each spec apart (store/listed.py) and sends the rows without
        waiting to be asked for each batch; SQLite's rows are decoded here (its JSON functions cost more than
        they save)."""
        if self._engine.dialect.name != "postgresql":
            return self._stream_decoded(codec.listed_job_from_row, **filters)
        def page(connection: Connection) -> Select[Any]:
            windowed = filters.get("start_after") is not None
            span = connection.execute(_LONGEST_SPAN).scalar() if windowed else None
            return listed.listed_select(select_jobs(**filters, longest_span_s=span, columns=(JOBS.c.id,)))

        return self._stream_listed(page)

    def _stream_listed(self, query: Callable[[Connection], Select[Any]]) -> Iterator[Job]:
        """A PostgreSQL listing's rows, streamed: PostgreSQL sends every row as it makes it (libpq's chunked
        mode) and takes each spec apart while this process decodes the rows before. Through a server-side cursor
        (stream_jobs) each batch waited for the one before to be decoded, and its plan was made for the first
        tenth of the rows: a page of a day's window took 0.21-0.25 s that way, 0.14 s streamed. One snapshot
        (REPEATABLE READ) for the read of the longest span and the rows."""
        with _translated("reading"), self._engine.connect() as sa_connection:
            connection = sa_connection.execution_options(isolation_level="REPEATABLE READ")
            yield from listed.streamed_jobs(connection, query(connection), _STREAM_ROWS)

    def _stream_decoded(self, decode: Callable[[Any], Job], **filters: Any) -> Iterator[Job]:
        """stream_jobs with each row decoded by `decode`."""
        if filters.get("start_after") is None:
            return self._stream(select_jobs(**filters), decode=decode)
        return self._stream(lambda connection: select_jobs(
            **filters, longest_span_s=connection.execute(_LONGEST_SPAN).scalar()), snapshot=True, decode=decode)

    def _jobs(self, query: Select[Any]) -> list[Job]:
        return list(self._stream(query))

    def _stream(self, query: Select[Any] | Callable[[Connection], Select[Any]],
                snapshot: bool = False, decode: Callable[[Any], Job] | None = None) -> Iterator[Job]:
        """`query`, or a function of the connection that reads what it needs and gives it; `snapshot`: every
        statement of the read sees the same state of the database (REPEATABLE READ on PostgreSQL; one
        SQLite transaction sees one snapshot already)."""
        # Decoded as the rows arrive, a batch at a time: 100,000 rows held at once with their parsed
        # JSON took 670 MiB, which the process kept after a restore. Jobs read together share their
        # equal parts.
        if decode is None:
            sharing = codec.Sharing()
            decode = lambda row: codec.job_from_row(row, sharing)  # noqa: E731
        with _translated("reading"), self._engine.connect() as connection:
            if snapshot and connection.dialect.name == "postgresql":
                connection = connection.execution_options(isolation_level="REPEATABLE READ")
            statement = query(connection) if callable(query) else query
            for row in connection.execution_options(yield_per=_BATCH_ROWS).execute(statement):
                yield decode(row)

    def _rows(self, query: Select[Any]) -> list[Any]:
        with _translated("reading"), self._engine.connect() as connection:
            return list(connection.execute(query))

    def _scalar(self, query: Select[Any]) -> Any:
        with _translated("reading"), self._engine.connect() as connection:
            return connection.execute(query).scalar()


def select_jobs(
    *,
    ids: Collection[int] | None = None,
    users: Collection[str] | None = None,
    states: Collection[JobState] | None = None,
    partitions: Collection[str] | None = None,
    accounts: Collection[str] | None = None,
    start_after: float | None = None,
    end_before: float | None = None,
    include_active: bool = True,
    after_id: int | None = None,
    limit: int | None = None,
    longest_span_s: float | None = None,
    columns: tuple[Any, ...] = (JOBS,),
) -> Select[Any]:
    """The jobs matching every given filter, ordered by id.

    A None filter matches everything; an empty collection matches nothing. The time window
    works like sacct's --starttime/--endtime: `start_after` keeps jobs that had not ended by
    then (end_time >= start_after, or not ended yet), `end_before` keeps jobs submitted by
    then (submit_time <= end_before); together: jobs that existed during the window.
    include_active=False keeps only jobs in a terminal state. `after_id` and `limit` page:
    the first `limit` matches with an id above `after_id`. `columns`: what each row holds (the whole row).

    `longest_span_s`, the longest end_time - submit_time of any finished job (None: no finished job),
    lets a window use an index: a finished job that ended after `start_after` was submitted after
    `start_after - longest_span_s`, a range of submit_time's index. Such jobs and the unfinished ones
    are then read apart (UNION ALL): with `end_time >= start_after OR end_time IS NULL` in one query,
    PostgreSQL scanned the whole table by id (1.7-2.4 s at a million jobs, bench/sacct_million.py).
    """
    if start_after is not None and longest_span_s is not None:
        return _window_union(start_after, longest_span_s, ids=ids, users=users, states=states,
                             partitions=partitions, accounts=accounts, end_before=end_before,
                             include_active=include_active, after_id=after_id, limit=limit, columns=columns)
    query = select(*columns).order_by(JOBS.c.id)
    if ids is not None:
        query = query.where(JOBS.c.id.in_(list(ids)))
    if users is not None:
        query = query.where(JOBS.c.user.in_(list(users)))
    if states is not None:
        query = query.where(JOBS.c.state.in_([JobState(state).value for state in states]))
    if partitions is not None:
        query = query.where(JOBS.c.partition.in_(list(partitions)))
    if accounts is not None:
        query = query.where(JOBS.c.account.in_(list(accounts)))
    if after_id is not None:
        query = query.where(JOBS.c.id > after_id)
    if start_after is not None:
        query = query.where((JOBS.c.end_time >= start_after) | JOBS.c.end_time.is_(None))
    if end_before is not None:
        query = query.where(JOBS.c.submit_time <= end_before)
    if not include_active:
        query = query.where(JOBS.c.state.not_in(_ACTIVE_VALUES))
    if limit is not None:
        query = query.limit(limit)
    return query


def _window_union(start_after: float, longest_span_s: float, *, include_active: bool, end_before: float | None,
                  after_id: int | None, limit: int | None, **filters: Any) -> Select[Any]:
    """select_jobs' window as two arms, each a range of one index: jobs with an end (a COMPLETING one too), by
    submit_time; those without, by end_time IS NULL."""
    arm = {**filters, "end_before": end_before, "include_active": include_active, "after_id": after_id, "limit": limit}
    ended = select_jobs(**arm).where(JOBS.c.end_time >= start_after,
                                     JOBS.c.submit_time >= start_after - longest_span_s)
    unended = select_jobs(**arm).where(JOBS.c.end_time.is_(None))
    # Each arm keeps its order and page as a subquery of its own (SQLite takes no ORDER BY in a UNION's arm).
    both = union_all(select(ended.subquery()), select(unended.subquery())).subquery("window")
    query = select(both).order_by(both.c.id)
    return query.limit(limit) if limit is not None else query


# The longest run of any finished job, read through the index on end_time - submit_time (one probe).
_LONGEST_SPAN = select(func.max(JOBS.c.end_time - JOBS.c.submit_time))
