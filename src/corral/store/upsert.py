"""Bulk insert-or-update, one statement per table, in each dialect's native form.

save() is the controller's hot path (after every batch of events), so the statement is
compiled once by SQLAlchemy and then executed as a plain DBAPI executemany: SQLAlchemy's
per-row parameter processing otherwise costs about as much as encoding and writing the row.
The only conversion our column types need on the way in is JSON encoding, done here.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import JSON, Boolean, Connection, Dialect, Double, Integer, String, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert

from corral.store.codec import json_dumps


def upsert_statement(dialect_name: str, table: Table) -> Insert:
    """INSERT ... ON CONFLICT (primary key) DO UPDATE SET every other column."""
    insert = sqlite.insert(table) if dialect_name == "sqlite" else postgresql.insert(table)
    keys = [column.name for column in table.primary_key]
    updates = {column.name: insert.excluded[column.name] for column in table.columns if not column.primary_key}
    return insert.on_conflict_do_update(index_elements=keys, set_=updates)


class BulkUpsert:
    """The upsert of one table, compiled for one dialect, run with many rows at once."""

    def __init__(self, dialect: Dialect, table: Table) -> None:
        compiled = upsert_statement(dialect.name, table).compile(dialect=dialect)
        self.sql = str(compiled)
        json_columns = {column.name for column in table.columns if isinstance(column.type, JSON)}
        # A new column type (a date, an enum) would need its own conversion here: fail loudly.
        unsupported = [c.name for c in table.columns if c.name not in json_columns and not _passes_through(c.type)]
        if unsupported:
            raise TypeError(f"{table.name}: no bind conversion for columns {unsupported}")
        # qmark (SQLite) binds by position, pyformat (psycopg) by name.
        names = list(compiled.positiontup or []) if compiled.positional else [c.name for c in table.columns]
        self._columns = [(name, name in json_columns) for name in names]
        self._positional = compiled.positional

    def bind(self, row: dict[str, Any]) -> Any:
        """One row's DBAPI parameters: a tuple (qmark) or a dict (pyformat), JSON encoded.

        Converting row by row lets each row's nested dicts die at once; built up for a whole
        batch first, they would outlive garbage collections and cost full ones later.
        """
        if self._positional:
            return tuple([json_dumps(row[n]) if is_json else row[n] for n, is_json in self._columns])
        return {n: json_dumps(row[n]) if is_json else row[n] for n, is_json in self._columns}

    def execute(self, connection: Connection, parameters: Sequence[Any]) -> None:
        """Run the upsert for rows converted by bind(), as one executemany."""
        if parameters:
            connection.exec_driver_sql(self.sql, parameters)


def _passes_through(column_type: Any) -> bool:
    """Types both drivers take as plain Python values (str, int, float, bool, None)."""
    return isinstance(column_type, (Integer, String, Double, Boolean))
