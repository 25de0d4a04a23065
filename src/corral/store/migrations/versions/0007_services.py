"""Services (issue 22): one table, one row per service; its replicas are jobs.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "services",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("user", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("desired_replicas", sa.Integer(), nullable=False),
        sa.Column("created", sa.Double(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_services"),
    )
    op.create_index("ix_services_user", "services", ["user"])


def downgrade() -> None:
    op.drop_index("ix_services_user", table_name="services")
    op.drop_table("services")
