"""Initial schema: jobs, nodes, cluster_meta.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("user", sa.Text(), nullable=False),
        sa.Column("partition", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("submit_time", sa.Double(), nullable=False),
        sa.Column("start_time", sa.Double(), nullable=True),
        sa.Column("end_time", sa.Double(), nullable=True),
        sa.Column("estimated_start", sa.Double(), nullable=True),
        sa.Column("time_limit_s", sa.Integer(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=False),
        sa.Column("exit_signal", sa.Integer(), nullable=False),
        sa.Column("gpu_seconds", sa.Double(), nullable=False),
        sa.Column("nodelist", sa.Text(), nullable=False),
        sa.Column("restart_count", sa.Integer(), nullable=False),
        sa.Column("final_state", sa.String(length=16), nullable=True),
        sa.Column("kill_deadline", sa.Double(), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("slices", sa.JSON(), nullable=False),
        sa.Column("runs", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    for column in ("state", "user", "submit_time", "end_time"):
        op.create_index(f"ix_jobs_{column}", "jobs", [column])

    op.create_table(
        "nodes",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.Column("cpus", sa.Integer(), nullable=False),
        sa.Column("mem_mib", sa.Integer(), nullable=False),
        sa.Column("address", sa.Text(), nullable=False),
        sa.Column("up", sa.Boolean(), nullable=False),
        sa.Column("drain", sa.Boolean(), nullable=False),
        sa.Column("drain_reason", sa.Text(), nullable=False),
        sa.Column("last_seen", sa.Double(), nullable=False),
        sa.Column("partitions", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_nodes"),
    )

    op.create_table(
        "cluster_meta",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_cluster_meta"),
    )


def downgrade() -> None:
    op.drop_table("cluster_meta")
    op.drop_table("nodes")
    for column in ("end_time", "submit_time", "user", "state"):
        op.drop_index(f"ix_jobs_{column}", table_name="jobs")
    op.drop_table("jobs")
