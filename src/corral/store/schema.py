"""Table definitions. Any change here needs a new migration in `migrations/versions/`.

The columns besides the JSON ones exist so accounting queries can filter and sort in SQL; the
JSON columns hold the nested parts of a record (spec, slices, runs, GPUs) whole.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Double, Index, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Stable constraint and index names, so migrations can refer to them on every dialect.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Long enough for every JobState value.
STATE_LENGTH = 16


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    # Double, not Float: times are float seconds since the epoch and must round-trip exactly.
    type_annotation_map = {
        float: Double(),
        str: Text(),
        dict[str, Any]: JSON(),
        list[Any]: JSON(),
    }


class JobRow(Base):
    __tablename__ = "jobs"

    # Job ids come from the controller (Slurm-style sequence), never from the database.
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    name: Mapped[str]
    user: Mapped[str] = mapped_column(index=True)
    partition: Mapped[str]
    state: Mapped[str] = mapped_column(String(STATE_LENGTH), index=True)
    reason: Mapped[str]
    priority: Mapped[int]
    submit_time: Mapped[float] = mapped_column(index=True)
    start_time: Mapped[float | None]
    end_time: Mapped[float | None] = mapped_column(index=True)
    estimated_start: Mapped[float | None]
    time_limit_s: Mapped[int]
    exit_code: Mapped[int]
    exit_signal: Mapped[int]
    # Denormalized from the slices and times at save time, so usage reports can sum it in SQL.
    gpu_seconds: Mapped[float]
    # Slurm hostlist expression of the job's nodes ("" while pending), for display and LIKE.
    nodelist: Mapped[str]
    restart_count: Mapped[int]
    final_state: Mapped[str | None] = mapped_column(String(STATE_LENGTH))
    kill_deadline: Mapped[float | None]
    spec: Mapped[dict[str, Any]]
    slices: Mapped[list[Any]]
    runs: Mapped[dict[str, Any]]
    # Added by 0002: the account (for accounting queries) and the job's mutable extras.
    account: Mapped[str] = mapped_column(index=True, server_default="")
    extra: Mapped[dict[str, Any]] = mapped_column(server_default="{}")


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(primary_key=True)
    gpus: Mapped[list[Any]]
    cpus: Mapped[int]
    mem_mib: Mapped[int]
    address: Mapped[str]
    up: Mapped[bool]
    drain: Mapped[bool]
    drain_reason: Mapped[str]
    last_seen: Mapped[float]
    partitions: Mapped[list[Any]]
    # run_as_user, agent_user, cgroups (Node): how the node's agent confines jobs; features: what --constraint matches.
    isolation: Mapped[dict[str, Any]] = mapped_column(server_default="{}")


class MetaRow(Base):
    """Small facts about the cluster the database belongs to (its name, ...)."""

    __tablename__ = "cluster_meta"

    key: Mapped[str] = mapped_column(primary_key=True)
    value: Mapped[str]


# The tables as Core objects, for the store's statements.
JOBS = Base.metadata.tables["jobs"]
# How long a finished job existed (submission to end): its maximum bounds a time window's range of
# submit_time (store.select_jobs), read in one probe of this index. Added by 0008.
Index("ix_jobs_span", JOBS.c.end_time - JOBS.c.submit_time)
NODES = Base.metadata.tables["nodes"]
META = Base.metadata.tables["cluster_meta"]


class TokenRow(Base):
    """An API token (`corral token create`): only the SHA-256 of its secret part is kept. Added by 0003."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(index=True)
    uid: Mapped[int]
    secret_sha256: Mapped[str]
    description: Mapped[str]
    created: Mapped[float]
    created_by: Mapped[str]
    expires: Mapped[float]
    revoked: Mapped[float | None]


class AuditRow(Base):
    """One line of the audit log: who did (or was refused) what. Added by 0003."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(index=True)
    who: Mapped[str]  # the user or node name, "-" when no credential was accepted
    credential: Mapped[str]  # which kind: "socket", "token 3", "job 12", "agent", "service"
    action: Mapped[str]
    target: Mapped[str]
    outcome: Mapped[str]  # "allowed", "denied" (403) or "unauthenticated" (401)
    detail: Mapped[str]


class JoinTokenRow(Base):
    """A one-time join token (`corral token create --join`): exchanged once, by a new machine's agent, for
    its node's agent credential. Only the SHA-256 of its secret is kept. Added by 0005."""

    __tablename__ = "join_tokens"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    secret_sha256: Mapped[str]
    node: Mapped[str | None]  # the only node it may join; None: any node not in the cluster yet
    description: Mapped[str]
    created: Mapped[float]
    created_by: Mapped[str]
    expires: Mapped[float]
    revoked: Mapped[float | None]
    used: Mapped[float | None]  # when it was exchanged; set once, by one UPDATE ... WHERE used IS NULL
    used_by: Mapped[str | None]  # the node that joined with it
    used_from: Mapped[str | None]  # the address the join came from


TOKENS = Base.metadata.tables["api_tokens"]
AUDIT = Base.metadata.tables["audit_log"]
JOIN_TOKENS = Base.metadata.tables["join_tokens"]


class LeaseRow(Base):
    """The one leadership lease (row id 1) that controllers sharing a database take turns holding. `epoch`
    grows by one at every takeover and fences writes (store.lease); `expires_at` is in the database's
    clock, seconds since the epoch. Added by 0006."""

    __tablename__ = "leader_lease"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    epoch: Mapped[int] = mapped_column(BigInteger)
    holder: Mapped[str]
    url: Mapped[str]
    pid: Mapped[int]
    expires_at: Mapped[float]


class ControllerRow(Base):
    """Every controller sharing the database, as it last said (each turn of its lease loop): for status.
    Added by 0006."""

    __tablename__ = "controllers"

    holder: Mapped[str] = mapped_column(primary_key=True)
    url: Mapped[str]
    pid: Mapped[int]
    role: Mapped[str]
    epoch: Mapped[int] = mapped_column(BigInteger)
    last_seen: Mapped[float]


LEASE = Base.metadata.tables["leader_lease"]
CONTROLLERS = Base.metadata.tables["controllers"]


class ServiceRow(Base):
    """A service (engine/records.py Service): its spec and what the engine keeps of it. Its replicas are
    jobs (their spec's `service`). Added by 0007."""

    __tablename__ = "services"

    name: Mapped[str] = mapped_column(primary_key=True)
    user: Mapped[str] = mapped_column(index=True)
    revision: Mapped[int]
    desired_replicas: Mapped[int]
    created: Mapped[float]
    deleted: Mapped[bool]
    spec: Mapped[dict[str, Any]]
    # The rest of the record (rolling update, restarts per replica, reason, history, load, uid).
    extra: Mapped[dict[str, Any]]


SERVICES = Base.metadata.tables["services"]
