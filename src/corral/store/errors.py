"""The one exception the store raises, so callers need not know SQLAlchemy's."""
from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError, SQLAlchemyError


class StoreError(RuntimeError):
    """The database could not be opened, migrated, read or written."""


@contextmanager
def translated(action: str) -> Iterator[None]:
    """Turn any database error into a StoreError that says what we were doing."""
    try:
        yield
    except SQLAlchemyError as exc:
        # The driver's own message says what went wrong; SQLAlchemy's wrapper adds the SQL and
        # a link (still there in the chained cause for a traceback).
        detail = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        raise StoreError(f"{action} failed: {str(detail).strip()}") from exc
    except sqlite3.Error as exc:  # the DBAPI's own, where a hot path uses its connection directly
        raise StoreError(f"{action} failed: {str(exc).strip()}") from exc
