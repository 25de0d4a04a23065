"""The PostgreSQL server for store tests, and a fresh schema per test."""
from __future__ import annotations

import glob
import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from corral.store.database import parse_url

PG_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pg-test-server.sh"
PG_SCRIPT_TIMEOUT_S = 600  # a first run may apt-get install postgresql


def _start_pg_server() -> str:
    result = subprocess.run([str(PG_SCRIPT)], capture_output=True, text=True, timeout=PG_SCRIPT_TIMEOUT_S, check=False)
    if result.returncode != 0:
        pytest.fail(f"{PG_SCRIPT} failed (rc {result.returncode}):\n{result.stderr}")
    return result.stdout.strip().splitlines()[-1]


def pg_server_url_or_skip() -> str:
    """URL of a PostgreSQL database whose user may CREATE SCHEMA; fails or skips without one."""
    if url := os.environ.get("CORRAL_TEST_PG_URL"):
        return url
    if os.environ.get("CORRAL_SKIP_PG") == "1":
        pytest.skip("CORRAL_SKIP_PG=1: PostgreSQL store tests skipped")
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        pytest.fail(
            "PostgreSQL binaries not found: install postgresql (apt-get install postgresql), "
            "set CORRAL_TEST_PG_URL, or set CORRAL_SKIP_PG=1 to skip the PostgreSQL tests"
        )
    return _start_pg_server()


@contextmanager
def fresh_pg_schema(server_url: str) -> Iterator[str]:
    """A URL whose connections work in a new, empty schema (dropped afterwards).

    A schema, not a database: CREATE DATABASE costs about half a second, CREATE SCHEMA a few
    milliseconds, and search_path makes the schema the store's default for tables and alembic.
    """
    name = f"corral_t_{uuid.uuid4().hex[:16]}"
    server = parse_url(server_url)
    admin = create_engine(server, isolation_level="AUTOCOMMIT", pool_pre_ping=True)  # survives a restart
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE SCHEMA "{name}"'))
        try:
            url = server.update_query_dict({"options": f"-csearch_path={name}"})
            yield url.render_as_string(hide_password=False)
        finally:
            with admin.connect() as connection:
                connection.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
    finally:
        admin.dispose()
