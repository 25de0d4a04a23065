"""Alembic migrations for the store (env.py, versions/). A package so that installs ship it."""
