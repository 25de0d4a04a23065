"""Migration scripts, applied in order by corral.store.migrate (alembic skips this file)."""
