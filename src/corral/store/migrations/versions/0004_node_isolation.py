"""Nodes: how the node's agent confines jobs (runs tasks as the job's user or, in development mode, as
itself; the cgroup v2 it uses, or why none), a JSON column.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("isolation", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("isolation")
