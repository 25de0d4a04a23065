"""Every store test runs against SQLite (a temp file) and PostgreSQL (a fresh schema each).

PostgreSQL comes from CORRAL_TEST_PG_URL, else from scripts/pg-test-server.sh (which starts a
throwaway server) when the PostgreSQL binaries are installed. Without either the PostgreSQL
tests fail, so a missing server is never mistaken for a pass; CORRAL_SKIP_PG=1 skips them.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from corral.store import Store
from tests.store.pg import fresh_pg_schema, pg_server_url_or_skip

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    return pg_server_url_or_skip()


@contextmanager
def backend_url(backend: str, request: pytest.FixtureRequest, directory: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{directory}/corral.db"
    else:
        with fresh_pg_schema(request.getfixturevalue("pg_server_url")) as url:
            yield url


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request.param, request, tmp_path) as url:
        yield url


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    with Store.open(db_url) as opened:
        yield opened


@pytest.fixture(scope="module", params=BACKENDS)
def module_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One store for a whole module (property tests run many examples against it)."""
    with backend_url(request.param, request, tmp_path_factory.mktemp("store")) as url:
        with Store.open(url) as opened:
            yield opened
