"""Best fit (the default): the nodes with the fewest free GPUs that still fit, by a walk up the pool's
buckets; a fraction goes to the shared device with the least room that still holds it, else to a whole free
device of the fullest node."""
from __future__ import annotations

from typing import TYPE_CHECKING

from corral.core.fgd import model_matches
from corral.core.model import GPU_MILLI, TaskShape
from corral.core.worknode import Need, WorkNode, device_with_room

if TYPE_CHECKING:
    from corral.core.placement import SearchedPool


class BestFit:
    def __init__(self, pool: SearchedPool) -> None:
        self.pool = pool

    def find(self, partition: str, need: Need, count: int, end: float,
             reservation: tuple[str, frozenset[str] | None] | None, model: str) -> list[WorkNode] | None:
        pool = self.pool
        buckets = pool.buckets.get(partition)
        if not buckets:
            return None
        name, allowed = reservation if reservation else ("", None)
        chosen: list[WorkNode] = []
        if need.gpu_milli < GPU_MILLI:
            chosen = self._shared_fits(partition, need, count, end, name, allowed, model)
            if len(chosen) == count:
                return chosen
        nodes, now = pool.nodes, pool.now
        for free_gpus in range(need.gpus, len(buckets)):
            for index in buckets[free_gpus]:
                node = nodes[index]
                if allowed is not None and node.name not in allowed:
                    continue
                if model and node.gpu_model != model and not model_matches(node.gpu_model, model):
                    continue
                if node.fits_window(need, now, end, name) and node not in chosen:
                    chosen.append(node)
                    if len(chosen) == count:
                        return chosen
        return None

    def _shared_fits(self, partition: str, need: Need, count: int, end: float, name: str,
                     allowed: frozenset[str] | None, model: str) -> list[WorkNode]:
        """Nodes with a shared device that holds the fraction, the tightest room first."""
        pool = self.pool
        rooms = pool.rooms.get(partition)
        chosen: list[WorkNode] = []
        if not rooms:
            return chosen
        for room in range(need.gpu_milli, GPU_MILLI):
            for index in rooms[room]:
                node = pool.nodes[index]
                if allowed is not None and node.name not in allowed:
                    continue
                if model and not model_matches(node.gpu_model, model):
                    continue
                if node.fits_window(need, pool.now, end, name) and node not in chosen:
                    chosen.append(node)
                    if len(chosen) == count:
                        return chosen
        return chosen

    def shared_device(self, node: WorkNode, need: Need) -> int:
        return device_with_room(node, node.share_room(need.gpu_milli))

    def moved(self, node: WorkNode) -> None:
        """Best fit uses the pool's own indexes (buckets, rooms)."""


def policy(task_mix: tuple[tuple[TaskShape, float], ...], fgd_cpu_weight: float) -> type[BestFit]:
    """Best fit needs neither the task mix nor a weight."""
    return BestFit
