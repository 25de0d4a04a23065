"""Alembic environment: migrates the connection that corral.store.migrate hands over.

The store runs migrations itself, inside its own transaction; there is no alembic.ini and no
offline (SQL script) mode.
"""
from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from corral.store.schema import Base


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    # The caller's transaction is already open, so this does not commit by itself.
    with context.begin_transaction():
        context.run_migrations()


_connection = context.config.attributes.get("connection")
if _connection is None:
    raise RuntimeError("corral migrations run through corral.store.migrate, not the alembic CLI")
run_migrations(_connection)
