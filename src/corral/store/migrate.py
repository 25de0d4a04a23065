"""Schema migrations, run in code when a store opens (no alembic.ini needed).

To write a new migration after changing schema.py, autogenerate a draft against a database
that is at head, then review it by hand:

    from corral.store import migrate
    migrate.revision("sqlite:////tmp/corral-dev.db", "add foo column")
"""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from corral.store.database import make_engine, sqlite_writer

MIGRATIONS_DIR = Path(__file__).with_name("migrations")

# Any constant works: it only has to be the same in every corral process sharing a server.
_PG_MIGRATION_LOCK_KEY = 0x636F7272616C  # "corral"


def alembic_config(connection: Connection | None = None) -> Config:
    """env.py migrates `connection` when given (in the caller's transaction)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def upgrade_to_head(engine: Engine) -> None:
    """Create or upgrade the schema in one transaction (atomic on SQLite and PostgreSQL)."""
    with sqlite_writer(engine).begin() as connection:
        if connection.dialect.name == "postgresql":
            # Two controllers starting at once must not both create the tables; the lock is
            # released at commit. (SQLite serializes through BEGIN IMMEDIATE instead.)
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK_KEY})
        command.upgrade(alembic_config(connection), "head")


def revision(url: str, message: str) -> None:
    """Autogenerate a draft migration comparing schema.py with the database at `url`."""
    engine = make_engine(url)
    try:
        upgrade_to_head(engine)
        with engine.begin() as connection:
            command.revision(alembic_config(connection), message=message, autogenerate=True)
    finally:
        engine.dispose()
