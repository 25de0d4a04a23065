"""What the engine gives back for the events it was handed: the one way effects leave it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.engine.commands import Command
from corral.engine.records import Job, Node, Service

# The cluster metadata the store keeps beside jobs and nodes (Result.meta names those that changed).
META_KEYS = ("tenancy", "fairshare", "reservations")


@dataclass(slots=True)
class Result:
    """`commands` for the agents, in order; the job and node records that changed (to be committed
    before the commands are carried out); the metadata keys that changed; and each event's reply."""

    commands: list[Command] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    meta: frozenset[str] = frozenset()
    replies: list[Any] = field(default_factory=list)
    # Services whose records changed (to commit with the jobs), and deleted ones whose last replica is gone.
    services: list[Service] = field(default_factory=list)
    services_forgotten: list[str] = field(default_factory=list)

    @property
    def reply(self) -> Any:
        """The reply to the last event (most calls hand over one)."""
        return self.replies[-1] if self.replies else None
