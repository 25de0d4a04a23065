"""API tokens and the audit log (tables added by migration 0003) and one-time join tokens (0005), in the
controller's database."""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, insert, select, update

from corral.store.database import sqlite_writer, try_sqlite_transaction
from corral.store.schema import AUDIT, JOIN_TOKENS, TOKENS
from corral.store.store import _translated


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: int
    user: str
    uid: int
    secret_sha256: str
    description: str
    created: float
    created_by: str
    expires: float
    revoked: float | None


@dataclass(frozen=True, slots=True)
class JoinTokenRecord:
    id: int
    secret_sha256: str
    node: str | None
    description: str
    created: float
    created_by: str
    expires: float
    revoked: float | None
    used: float | None
    used_by: str | None
    used_from: str | None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    time: float
    who: str
    credential: str
    action: str
    target: str
    outcome: str
    detail: str = ""


def _audit_row(entry: AuditEntry) -> dict[str, Any]:
    return {"time": entry.time, "who": entry.who, "credential": entry.credential, "action": entry.action,
            "target": entry.target, "outcome": entry.outcome, "detail": entry.detail}


class AuthStore:
    """Thread-safe like Store: every call uses its own connection (the controller calls it from threads)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = sqlite_writer(engine)  # BEGIN IMMEDIATE on SQLite, as the Store's writes
        self._audit_columns = [column.name for column in AUDIT.columns if not column.primary_key]
        quoted = ", ".join(f'"{column}"' for column in self._audit_columns)
        self._audit_sql = f"INSERT INTO {AUDIT.name} ({quoted}) VALUES ({', '.join('?' * len(self._audit_columns))})"

    def add_token(self, user: str, uid: int, secret_sha256: str, description: str, created: float,
                  created_by: str, expires: float) -> int:
        with _translated("saving a token"), self._writer.begin() as connection:
            result = connection.execute(insert(TOKENS).values(
                user=user, uid=uid, secret_sha256=secret_sha256, description=description, created=created,
                created_by=created_by, expires=expires, revoked=None))
            key = result.inserted_primary_key
            assert key is not None  # an INSERT of one row has one
            return int(key[0])

    def token(self, token_id: int) -> TokenRecord | None:
        with _translated("reading a token"), self._engine.connect() as connection:
            row = connection.execute(select(TOKENS).where(TOKENS.c.id == token_id)).mappings().first()
        return TokenRecord(**row) if row is not None else None

    def tokens(self, user: str | None = None) -> list[TokenRecord]:
        query = select(TOKENS).order_by(TOKENS.c.id)
        if user is not None:
            query = query.where(TOKENS.c.user == user)
        with _translated("reading tokens"), self._engine.connect() as connection:
            return [TokenRecord(**row) for row in connection.execute(query).mappings()]

    def revoke_token(self, token_id: int, now: float) -> None:
        with _translated("revoking a token"), self._writer.begin() as connection:
            connection.execute(update(TOKENS).where(TOKENS.c.id == token_id, TOKENS.c.revoked.is_(None))
                               .values(revoked=now))

    def add_join_token(self, secret_sha256: str, node: str | None, description: str, created: float,
                       created_by: str, expires: float) -> int:
        with _translated("saving a join token"), self._writer.begin() as connection:
            result = connection.execute(insert(JOIN_TOKENS).values(
                secret_sha256=secret_sha256, node=node, description=description, created=created,
                created_by=created_by, expires=expires))
            key = result.inserted_primary_key
            assert key is not None  # an INSERT of one row has one
            return int(key[0])

    def join_token(self, token_id: int) -> JoinTokenRecord | None:
        with _translated("reading a join token"), self._engine.connect() as connection:
            row = connection.execute(select(JOIN_TOKENS).where(JOIN_TOKENS.c.id == token_id)).mappings().first()
        return JoinTokenRecord(**row) if row is not None else None

    def join_tokens(self) -> list[JoinTokenRecord]:
        with _translated("reading join tokens"), self._engine.connect() as connection:
            rows = connection.execute(select(JOIN_TOKENS).order_by(JOIN_TOKENS.c.id)).mappings()
            return [JoinTokenRecord(**row) for row in rows]

    def revoke_join_token(self, token_id: int, now: float) -> None:
        with _translated("revoking a join token"), self._writer.begin() as connection:
            connection.execute(update(JOIN_TOKENS).where(JOIN_TOKENS.c.id == token_id,
                                                         JOIN_TOKENS.c.revoked.is_(None)).values(revoked=now))

    def use_join_token(self, token_id: int, node: str, address: str, now: float) -> bool:
        """Mark the token used by `node`, if it is still unused, unrevoked and unexpired: one UPDATE, so of
        two joins racing with one token exactly one gets True."""
        with _translated("using a join token"), self._writer.begin() as connection:
            result = connection.execute(update(JOIN_TOKENS).where(
                JOIN_TOKENS.c.id == token_id, JOIN_TOKENS.c.used.is_(None), JOIN_TOKENS.c.revoked.is_(None),
                JOIN_TOKENS.c.expires > now).values(used=now, used_by=node, used_from=address))
            return result.rowcount == 1

    def audit(self, *entries: AuditEntry) -> None:
        """Append the entries, in order, in one transaction."""
        if not entries:
            return
        with _translated("writing the audit log"), self._writer.begin() as connection:
            connection.execute(insert(AUDIT), [_audit_row(entry) for entry in entries])

    def try_audit(self, *entries: AuditEntry) -> bool:
        """audit() if that needs no waiting, else write nothing and return False (as Store.try_write: on
        SQLite when another connection holds the write lock, on PostgreSQL always)."""
        if self._engine.dialect.name != "sqlite":
            return False
        if not entries:
            return True
        rows = [tuple(_audit_row(entry)[column] for column in self._audit_columns) for entry in entries]

        def append(sqlite: sqlite3.Connection) -> None:
            sqlite.executemany(self._audit_sql, rows)

        with _translated("writing the audit log"):
            return try_sqlite_transaction(self._engine, append)

    def audit_entries(self, since: float | None = None, limit: int = 1000) -> list[AuditEntry]:
        """The newest `limit` entries (at or after `since`), oldest first."""
        query = select(AUDIT).order_by(AUDIT.c.id.desc()).limit(limit)
        if since is not None:
            query = query.where(AUDIT.c.time >= since)
        with _translated("reading the audit log"), self._engine.connect() as connection:
            rows = list(connection.execute(query).mappings())
        return [AuditEntry(**{k: v for k, v in row.items() if k != "id"}) for row in reversed(rows)]
