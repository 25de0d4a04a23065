"""Persistent store: jobs and nodes in SQLite (default) or PostgreSQL, migrated by Alembic."""
from corral.store.errors import StoreError
from corral.store.store import ACTIVE_STATES, Store

__all__ = ["ACTIVE_STATES", "Store", "StoreError"]
