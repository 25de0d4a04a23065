"""Tenancy: the job's account (indexed, for accounting) and a JSON column of mutable extras
(held, prior GPU-seconds of requeued runs, reason detail, history).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("account", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("extra", sa.JSON(), nullable=False, server_default="{}"))
    op.create_index("ix_jobs_account", "jobs", ["account"])


def downgrade() -> None:
    op.drop_index("ix_jobs_account", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("extra")
        batch.drop_column("account")
