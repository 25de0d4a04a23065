"""The leadership lease that controllers sharing one database take turns holding, and their registry.

One row (leader_lease, id 1) says who leads: `epoch` grows by one at every takeover, `expires_at` is in
the database's clock (never a controller's: their clocks may disagree). A controller takes the lease in
one transaction that locks the row, when it is free: expired (PostgreSQL), never held, held by itself,
or held by a process of this host that has exited. Every write of the store then checks in its own
transaction, row locked, that the epoch is still the writer's (check_fence): a controller that lost the
lease while paused or cut off can write nothing, whatever it believes.
"""
from __future__ import annotations

import os
import secrets
import socket
import sqlite3
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

from corral.store.database import sqlite_writer
from corral.store.errors import translated
from corral.store.schema import CONTROLLERS
from corral.store.upsert import BulkUpsert

# A fence that no lease epoch matches: the store of a controller that does not lead writes nothing.
NOT_LEADER = -1
# How long a statement of the lease loop may wait for the lease row's lock (PostgreSQL), and how long a
# writer's transaction may sit idle holding it (a paused controller mid-commit must not block takeovers).
LOCK_TIMEOUT_MS = 1000
IDLE_IN_TRANSACTION_MS = 2000


class LeaseLost(Exception):
    """A write was refused: another controller took the lease since this one's epoch."""

    def __init__(self, mine: int, current: int, leader_url: str) -> None:
        self.mine, self.current, self.leader_url = mine, current, leader_url
        if mine == NOT_LEADER:
            super().__init__("this controller is not the leader: it may not write")
        else:
            super().__init__(f"the lease moved to epoch {current} ({leader_url or 'no leader now'}): "
                             f"this controller (epoch {mine}) may no longer write")


@dataclass(frozen=True)
class Holder:
    """One controller process: `id` names the host, its PID namespace, the pid and a random token, so
    that a controller can tell a dead holder on its own host from a live one anywhere."""

    id: str
    url: str
    pid: int

    @classmethod
    def this_process(cls, url: str) -> Holder:
        pid = os.getpid()
        return cls(f"{socket.gethostname()}:{_pid_namespace()}:{pid}:{secrets.token_hex(4)}", url, pid)


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def _same_host(holder_id: str) -> bool:
    host, namespace, *_ = holder_id.split(":") + ["", ""]
    return bool(namespace) and host == socket.gethostname() and namespace == _pid_namespace()


def exited_here(holder_id: str) -> bool:
    """Whether `holder_id` was a process of this host (and PID namespace) that no longer runs."""
    if not _same_host(holder_id):
        return False
    try:
        pid = int(holder_id.split(":")[-2])
    except (ValueError, IndexError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a killed process its parent has not reaped yet is gone too
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


@dataclass(frozen=True)
class LeaseView:
    epoch: int
    holder: str
    url: str
    pid: int
    expires_at: float
    db_now: float

    @property
    def held(self) -> bool:
        return bool(self.holder) and self.expires_at > self.db_now


@dataclass(frozen=True)
class ControllerView:
    holder: str
    url: str
    pid: int
    role: str
    epoch: int
    last_seen: float


def db_now_sql(dialect: str) -> str:
    """The database's clock, seconds since the epoch, as SQL."""
    if dialect == "sqlite":
        return "((julianday('now') - 2440587.5) * 86400.0)"
    return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"


def check_fence(connection: Connection, fence: int) -> None:
    """Inside a write's transaction, before it writes: lock the lease row and check that its epoch is
    `fence`, or raise LeaseLost. The lock is held until the write commits, so a takeover waits for the
    write or the write sees the takeover."""
    if connection.dialect.name == "postgresql":  # one round trip: the setting lasts this transaction
        row = connection.exec_driver_sql(
            f"SELECT set_config('idle_in_transaction_session_timeout', '{IDLE_IN_TRANSACTION_MS}', true), "
            "epoch, url FROM leader_lease WHERE id = 1 FOR UPDATE").one()
    else:  # SQLite: the writer's BEGIN IMMEDIATE already excludes every other writer
        row = connection.exec_driver_sql("SELECT epoch, url FROM leader_lease WHERE id = 1").one()
    if row.epoch != fence:
        raise LeaseLost(fence, row.epoch, row.url)


def check_fence_sqlite(sqlite: sqlite3.Connection, fence: int) -> None:
    """check_fence on SQLite's DBAPI connection, inside a transaction begun IMMEDIATE (Store.try_write)."""
    row = sqlite.execute("SELECT epoch, url FROM leader_lease WHERE id = 1").fetchone()
    if row is None:
        raise sqlite3.IntegrityError("the leader_lease row is missing")
    if row[0] != fence:
        raise LeaseLost(fence, row[0], row[1])


class Leases:
    """The lease and the registry of one database. Every call is one short transaction; StoreError when
    the database fails."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = sqlite_writer(engine)
        self._dialect = engine.dialect.name
        self._now = db_now_sql(self._dialect)
        self._upsert = BulkUpsert(engine.dialect, CONTROLLERS)

    @property
    def expires_by_time(self) -> bool:
        """PostgreSQL: a lease not renewed in time is free. SQLite lives on one host, whose processes are
        checked directly: a lease is free when its holder has exited, and a paused holder keeps it."""
        return self._dialect != "sqlite"

    def read(self) -> LeaseView:
        with self._failures("reading the leader lease"), self._engine.connect() as connection:
            return self._read(connection, lock=False)

    def acquire(self, me: Holder, ttl_s: float) -> LeaseView | None:
        """Take the lease if it is free, with a new epoch; None when another controller holds it."""
        taken, lease = self.try_acquire(me, ttl_s)
        return lease if taken else None

    def try_acquire(self, me: Holder, ttl_s: float) -> tuple[bool, LeaseView]:
        """Take the lease if it is free, with a new epoch: (True, the new lease), or (False, the lease
        another controller holds)."""
        with self._failures("taking the leader lease"), self._writer.begin() as connection:
            self._limit_lock_wait(connection)
            lease = self._read(connection, lock=True)
            if not self._free(lease, me):
                return False, lease
            connection.execute(text(
                f"UPDATE leader_lease SET epoch = epoch + 1, holder = :holder, url = :url, pid = :pid, "
                f"expires_at = {self._now} + :ttl WHERE id = 1 AND epoch = :seen"),
                {"holder": me.id, "url": me.url, "pid": me.pid, "ttl": ttl_s, "seen": lease.epoch})
            return True, self._read(connection, lock=False)

    def _free(self, lease: LeaseView, me: Holder) -> bool:
        if lease.holder in ("", me.id) or exited_here(lease.holder):
            return True
        return not lease.held and (self.expires_by_time or not _same_host(lease.holder))

    def renew(self, epoch: int, ttl_s: float) -> bool:
        """Extend the lease of `epoch` by `ttl_s` from now; False when the lease has moved on."""
        with self._failures("renewing the leader lease"), self._writer.begin() as connection:
            self._limit_lock_wait(connection)
            renewed = connection.execute(text(
                f"UPDATE leader_lease SET expires_at = {self._now} + :ttl WHERE id = 1 AND epoch = :epoch"),
                {"ttl": ttl_s, "epoch": epoch})
            return renewed.rowcount == 1

    def release(self, epoch: int) -> None:
        """Give the lease of `epoch` up at once (a controller stopping): a standby takes over without
        waiting for it to expire."""
        with self._failures("releasing the leader lease"), self._writer.begin() as connection:
            self._limit_lock_wait(connection)
            connection.execute(text("UPDATE leader_lease SET holder = '', url = '', pid = 0, expires_at = 0 "
                                    "WHERE id = 1 AND epoch = :epoch"), {"epoch": epoch})

    def heartbeat(self, me: Holder, role: str, epoch: int, forget_after_s: float) -> None:
        """Record this controller in the registry, and forget those not heard of for `forget_after_s`."""
        with self._failures("updating the controllers' registry"), self._writer.begin() as connection:
            self._limit_lock_wait(connection)
            now = connection.execute(text(f"SELECT {self._now}")).scalar_one()
            self._upsert.execute(connection, [self._upsert.bind(
                {"holder": me.id, "url": me.url, "pid": me.pid, "role": role, "epoch": epoch, "last_seen": now})])
            connection.execute(text("DELETE FROM controllers WHERE last_seen < :oldest"),
                               {"oldest": now - forget_after_s})

    def forget(self, me: Holder) -> None:
        with self._failures("updating the controllers' registry"), self._writer.begin() as connection:
            connection.execute(text("DELETE FROM controllers WHERE holder = :holder"), {"holder": me.id})

    def controllers(self) -> tuple[LeaseView, list[ControllerView]]:
        """The lease and every registered controller, in one read; a controller's role is the lease's
        word (whoever holds it unexpired leads), not what it last wrote."""
        with self._failures("reading the controllers' registry"), self._engine.connect() as connection:
            lease = self._read(connection, lock=False)
            rows = connection.execute(text("SELECT holder, url, pid, role, epoch, last_seen FROM controllers "
                                           "ORDER BY url, holder")).all()
        leads = lease.held or (bool(lease.holder) and not self.expires_by_time)
        return lease, [ControllerView(r.holder, r.url, r.pid,
                                      "leader" if leads and r.holder == lease.holder else "standby",
                                      lease.epoch if r.holder == lease.holder else r.epoch, r.last_seen)
                       for r in rows]

    def _read(self, connection: Connection, lock: bool) -> LeaseView:
        row = connection.execute(text(
            f"SELECT epoch, holder, url, pid, expires_at, {self._now} AS db_now FROM leader_lease WHERE id = 1"
            + (" FOR UPDATE" if lock and self._dialect == "postgresql" else ""))).one()
        return LeaseView(row.epoch, row.holder, row.url, row.pid, row.expires_at, row.db_now)

    def _limit_lock_wait(self, connection: Connection) -> None:
        if self._dialect == "postgresql":
            connection.exec_driver_sql(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")

    def _failures(self, action: str):
        return translated(action)
