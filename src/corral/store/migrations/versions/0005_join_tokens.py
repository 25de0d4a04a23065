"""Identity: one-time join tokens (hashed) that a new machine's agent exchanges for its node's credential.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "join_tokens",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("secret_sha256", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created", sa.Double(), nullable=False),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column("expires", sa.Double(), nullable=False),
        sa.Column("revoked", sa.Double(), nullable=True),
        sa.Column("used", sa.Double(), nullable=True),
        sa.Column("used_by", sa.Text(), nullable=True),
        sa.Column("used_from", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_join_tokens"),
    )


def downgrade() -> None:
    op.drop_table("join_tokens")
