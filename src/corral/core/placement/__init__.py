"""Placement: which nodes and devices a request gets. This package's top is the interface alone, which both
the working pool (core/pool.py) and the policies import; one module per policy (bestfit, fgd, fgd_cpu) behind
it. The policy is chosen once, when the scheduler configuration is made (`SchedulerConfig.placement_policy`,
core/config.py), never per job.

A policy is a `PlacementPolicy`: called with a working pool, it gives that pool's `Placement` (which may
keep its own index of the pool's nodes: FGD groups them by fragmentation state). A placement reads the pool
only through `SearchedPool`, so the pool and the policies never name each other.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from corral.core.worknode import Need, WorkNode


class SearchedPool(Protocol):
    """What a placement reads of the working pool it searches (core/pool.py: NodePool)."""

    @property
    def now(self) -> float: ...

    @property
    def nodes(self) -> list[WorkNode]: ...

    @property
    def buckets(self) -> dict[str, list[dict[int, None]]]:
        """partition -> buckets[free GPU count] -> schedulable node indices."""

    @property
    def rooms(self) -> dict[str, list[dict[int, None]]]:
        """partition -> room (free milli of a shared device) -> schedulable node indices."""


class Placement(Protocol):
    def find(self, partition: str, need: Need, count: int, end: float,
             reservation: tuple[str, frozenset[str] | None] | None, model: str) -> list[WorkNode] | None:
        """The `count` nodes of `partition` to run `need` on from now until `end` (see WorkPool.find_now)."""

    def shared_device(self, node: WorkNode, need: Need) -> int:
        """The device of `node` a fractional request (need.gpu_milli < 1000) goes to."""

    def moved(self, node: WorkNode) -> None:
        """A schedulable node's free resources changed."""


PlacementPolicy = Callable[[SearchedPool], Placement]
