"""Placement policies: which nodes and devices a request gets. One module per policy (bestfit, fgd,
fgd_cpu), each behind the small `Placement` interface that the working pool calls; the policy is chosen once,
when the scheduler configuration is made (`SchedulerConfig.placement_policy`), never per job.

A policy is a `PlacementPolicy`: called with a working pool, it gives that pool's `Placement` (which may
keep its own index of the pool's nodes: FGD groups them by fragmentation state).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from corral.core.placement import bestfit, fgd, fgd_cpu
from corral.core.worknode import Need, WorkNode

if TYPE_CHECKING:
    from corral.core.model import SchedulerConfig
    from corral.core.pool import WorkPool


class Placement(Protocol):
    def find(self, partition: str, need: Need, count: int, end: float,
             reservation: tuple[str, frozenset[str]] | None, model: str) -> list[WorkNode] | None:
        """The `count` nodes of `partition` to run `need` on from now until `end` (see WorkPool.find_now)."""

    def shared_device(self, node: WorkNode, need: Need) -> int:
        """The device of `node` a fractional request (need.gpu_milli < 1000) goes to."""

    def moved(self, node: WorkNode) -> None:
        """A schedulable node's free resources changed."""


PlacementPolicy = Callable[["WorkPool"], Placement]


def resolve(config: SchedulerConfig) -> PlacementPolicy:
    """The policy `config.placement` names, made for its task mix and weights."""
    return _POLICIES[config.placement](config)


_POLICIES: dict[str, Callable[[SchedulerConfig], PlacementPolicy]] = {
    "bestfit": bestfit.policy, "fgd": fgd.policy, "fgd+cpu": fgd_cpu.policy}
