"""FGD placement (fragmentation gradient descent, Weng et al. ATC'23; the measure is core/fgd.py): the node
and device whose use least increases the node's expected GPU fragmentation for the configured task mix.

The placement groups the pool's schedulable nodes by fragmentation state (GPU model, free milli per device,
free CPUs) per partition, so a request scores each state once and takes a node of the best state that fits.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from corral.core.fgd import Fit, FragScorer, StateKey, model_matches, scorer_for
from corral.core.model import GPU_MILLI, TaskShape
from corral.core.worknode import Need, WorkNode, device_with_room

if TYPE_CHECKING:
    from corral.core.placement import PlacementPolicy, SearchedPool


class Fgd:
    def __init__(self, scorer: FragScorer, pool: SearchedPool) -> None:
        self.scorer = scorer
        self.pool = pool
        # partition -> fragmentation state (interned id) -> schedulable nodes in that state
        self.groups: dict[str, dict[int, dict[int, None]]] = {}
        self.node_key: dict[int, int] = {}
        for node in pool.nodes:
            if node.schedulable:
                self.moved(node)

    def find(self, partition: str, need: Need, count: int, end: float,
             reservation: tuple[str, frozenset[str] | None] | None, model: str) -> list[WorkNode] | None:
        """Score each fragmentation state once, then take nodes of the best states that fit."""
        groups = self.groups.get(partition)
        if not groups:
            return None
        name, allowed = reservation if reservation else ("", None)
        scorer = self.scorer
        gpus, milli, cpus = need.gpus, need.gpu_milli, need.cpus
        table = scorer.table(gpus, milli, cpus)
        keys = scorer.keys
        scored: list[tuple[Fit, int, dict[int, None]]] = []
        lookup = table.get  # a state never scored for this task gives the sentinel
        for state, members in groups.items():
            score = lookup(state, _UNSCORED)
            if score is _UNSCORED:
                score = scorer.best(state, gpus, milli, cpus)
            if score is not None and (not model or model_matches(keys[state][0], model)):
                scored.append((score, state, members))
        if not scored:
            return None
        order = _score_order(keys)
        if count == 1:
            top = min(scored, key=order)
            node = self._first_fitting(top[2], need, end, name, allowed)
            if node is not None:
                return [node]
        scored.sort(key=order)
        chosen: list[WorkNode] = []
        nodes, now = self.pool.nodes, self.pool.now
        for _, _, members in scored:
            for index in members:
                node = nodes[index]
                if (allowed is None or node.name in allowed) and node.fits_window(need, now, end, name):
                    chosen.append(node)
                    if len(chosen) == count:
                        return chosen
        return None

    def _first_fitting(self, members: dict[int, None], need: Need, end: float, name: str,
                       allowed: frozenset[str] | None) -> WorkNode | None:
        nodes, now = self.pool.nodes, self.pool.now
        for index in members:
            node = nodes[index]
            if (allowed is None or node.name in allowed) and node.fits_window(need, now, end, name):
                return node
        return None

    def shared_device(self, node: WorkNode, need: Need) -> int:
        """The device its score chose (a node with reservation blocks: the tightest shared device)."""
        room = node.share_room(need.gpu_milli)
        if not node.blocks:
            scorer = self.scorer
            score = scorer.best(scorer.intern(_state_key(node)), 1, need.gpu_milli, need.cpus)
            if score is not None:
                room = score[3] if score[3] < GPU_MILLI else None
        return device_with_room(node, room)

    def moved(self, node: WorkNode) -> None:
        """Move a schedulable node to the group of its current fragmentation state."""
        key = self.scorer.intern(_state_key(node))
        old = self.node_key.get(node.index)
        if old == key:
            return
        self.node_key[node.index] = key
        for part in node.partitions:
            groups = self.groups.setdefault(part, {})
            if old is not None:
                members = groups[old]
                del members[node.index]
                if not members:
                    del groups[old]
            groups.setdefault(key, {})[node.index] = None


def with_scorer(scorer: FragScorer) -> PlacementPolicy:
    return functools.partial(Fgd, scorer)


def policy(task_mix: tuple[tuple[TaskShape, float], ...], fgd_cpu_weight: float) -> PlacementPolicy:
    """Plain FGD: the paper's fragmentation measure over `task_mix` (the CPU weight is fgd+cpu's)."""
    return with_scorer(scorer_for(task_mix, 0.0))


_UNSCORED: Fit = (0.0, -1, -1, -1)  # a sentinel, told by identity: no score is this object


def _state_key(node: WorkNode) -> StateKey:
    return (node.gpu_model, node.free_milli(), node.free_cpus)


def _score_order(keys: list[StateKey]) -> Callable[[tuple[Fit, int, dict[int, None]]], tuple[Fit, StateKey]]:
    """Best score first; ties by the state itself (not its id, which depends on what was scored before)."""
    def order(item: tuple[Fit, int, dict[int, None]]) -> tuple[Fit, StateKey]:
        return item[0], keys[item[1]]
    return order
