"""The one exception the store raises, so callers need not know SQLAlchemy's."""
from __future__ import annotations


class StoreError(RuntimeError):
    """The database could not be opened, migrated, read or written."""
