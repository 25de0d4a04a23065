"""An index on how long each finished job existed (end_time - submit_time), so that a time window of
accounting reads a range of submit_time rather than the whole table (issue 24, item 4).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_index("ix_jobs_span", "jobs", [sa.text("(end_time - submit_time)")])


def downgrade() -> None:
    op.drop_index("ix_jobs_span", table_name="jobs")
