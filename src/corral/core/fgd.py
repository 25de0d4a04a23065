"""Fragmentation gradient descent (FGD, Weng et al., USENIX ATC'23): place a task where it least increases
the node's expected GPU fragmentation with respect to the target workload.

A node's state, as far as fragmentation goes, is its GPU model, the free milli-GPU of each device (as a
sorted tuple: which device is which does not matter) and its free CPUs. Its fragmentation for one typical
task is the free GPU capacity that task could not use there: all of it when the task cannot run on the
node at all (wrong GPU model, too few CPUs, too few devices with enough room), otherwise the free share of
the devices too small for the task's per-device request. The node's fragmentation is the expectation of
that over the task mix. Memory is left out, as in the paper's simulator.

CPU-stranded variant (`cpu_weight` > 0, placement "fgd+cpu"): a task shape that fits a node once may still
not get CPUs for as many copies as the node's GPUs could hold. FGD counts such GPUs as usable; here the share
of the usable free GPU capacity that its copies could not get CPUs for, 1 - free CPUs / (copies x the
shape's CPUs) when positive, also counts as fragment, weighted by `cpu_weight` (a task using few CPUs on a
CPU-poor node then scores better than one using many). The state then keys on the exact free CPUs.

Pure functions of (state, task mix), memoized: the cache keys are states, so a scorer can be reused for
as long as its task mix holds (`scorer_for` keeps one per mix). CPU-only shapes of the mix are left out:
they add the same amount to every candidate's score, so they never change a choice.
"""
from __future__ import annotations

import functools
from bisect import bisect_left, bisect_right

from corral import gpu_models
from corral.core.model import GPU_MILLI, TaskShape

# A node's state for scoring: (GPU model, free milli per device sorted high to low, free CPUs).
StateKey = tuple[str, tuple[int, ...], int]
# How well a task fits a node state: see FragScorer.best.
Fit = tuple[float, int, int, int]

# (node model, constraint) -> matches: placement asks for every candidate node of every job.
_matches_memo: dict[tuple[str, str], bool] = {}
_MATCHES_MEMO_LIMIT = 65536


def model_matches(node_model: str, constraint: str) -> bool:
    """Does a node of `node_model` satisfy a GPU model constraint ("" = any, "A|B" = either)? Case and
    separators do not count, and a device answers to its short type (corral.gpu_models has the rule)."""
    if not constraint or node_model == constraint:
        return True
    pair = (node_model, constraint)
    found = _matches_memo.get(pair)
    if found is None:
        if len(_matches_memo) >= _MATCHES_MEMO_LIMIT:
            _matches_memo.clear()
        found = _matches_memo[pair] = gpu_models.matches(node_model, constraint)
    return found


class FragScorer:
    def __init__(self, mix: tuple[tuple[TaskShape, float], ...], cpu_weight: float = 0.0) -> None:
        if cpu_weight < 0:
            raise ValueError(f"cpu_weight {cpu_weight}: must be >= 0")
        gpu_shapes = [(s, w) for s, w in mix if s.gpus > 0 and w > 0]
        total = sum(w for _, w in gpu_shapes)
        self.cpu_weight = cpu_weight
        # For the CPU-stranded variant: (gpus, per-device milli, CPUs, model constraint, probability)
        self.cpu_shapes = [(s.gpus, s.gpu_milli, s.cpus, s.gpu_model, w / total) for s, w in gpu_shapes]
        self.thresholds = sorted({s.cpus for s, _ in gpu_shapes})
        # (gpus, per-device milli, index of its CPU need among thresholds, model constraint, probability)
        self.shapes = [(s.gpus, s.gpu_milli, bisect_left(self.thresholds, s.cpus), s.gpu_model, w / total)
                       for s, w in gpu_shapes]
        self._frag: dict[tuple[str, tuple[int, ...], int], float] = {}
        # States are interned to small ints (tuples of tuples re-hash on every lookup): id -> key, key -> id.
        self.keys: list[StateKey] = []
        self.ids: dict[StateKey, int] = {}
        # (gpus, milli, cpus) -> state id -> best() of that task in that state
        self.tables: dict[tuple[int, int, int], dict[int, Fit | None]] = {}

    def intern(self, key: StateKey) -> int:
        found = self.ids.get(key)
        if found is None:
            found = self.ids[key] = len(self.keys)
            self.keys.append(key)
        return found

    def table(self, gpus: int, milli: int, cpus: int) -> dict[int, Fit | None]:
        """The memo of `best` for one task shape, keyed by state id (fill misses with `best`)."""
        task = (gpus, milli, cpus)
        found = self.tables.get(task)
        if found is None:
            found = self.tables[task] = {}
        return found

    def node_frag(self, model: str, free: tuple[int, ...], cpus: int) -> float:
        """Expected fragmented milli-GPU of a node in this state (free: per device, any order)."""
        free = tuple(sorted(free, reverse=True))
        if self.cpu_weight:
            key = (model, free, cpus)
            cached = self._frag.get(key)
            if cached is None:
                cached = self._frag[key] = self._compute_stranded(model, free, cpus)
            return cached
        cpu_class = bisect_right(self.thresholds, cpus)
        key = (model, free, cpu_class)
        cached = self._frag.get(key)
        if cached is None:
            cached = self._frag[key] = self._compute(model, free, cpu_class)
        return cached

    def _compute(self, model: str, free: tuple[int, ...], cpu_class: int) -> float:
        total = sum(free)
        if total == 0:
            return 0.0
        frag = 0.0
        for gpus, milli, cpu_index, constraint, p in self.shapes:
            if cpu_class <= cpu_index or (constraint and not model_matches(model, constraint)):
                frag += p * total
                continue
            fitting, small = 0, 0
            for f in free:
                if f >= milli:
                    fitting += 1
                else:
                    small += f
            frag += p * (small if fitting >= gpus else total)
        return frag

    def _compute_stranded(self, model: str, free: tuple[int, ...], cpus: int) -> float:
        """`_compute`, plus `cpu_weight` x the usable free capacity that copies of a shape lack CPUs for."""
        total = sum(free)
        if total == 0:
            return 0.0
        frag = 0.0
        weight = self.cpu_weight
        for gpus, milli, need_cpus, constraint, p in self.cpu_shapes:
            if cpus < need_cpus or (constraint and not model_matches(model, constraint)):
                frag += p * total
                continue
            fitting, small, copies = 0, 0, 0
            for f in free:
                if f >= milli:
                    fitting += 1
                    copies += f // milli
                else:
                    small += f
            if fitting < gpus:
                frag += p * total
                continue
            copies //= gpus
            short = max(0.0, 1.0 - cpus / (need_cpus * copies)) if need_cpus else 0.0
            frag += p * (small + weight * short * (total - small))
        return frag

    def best(self, state: int, gpus: int, milli: int, cpus: int) -> Fit | None:
        """How well a task (gpus x milli, cpus) fits a node in state `state` (an interned id): (increase of
        fragmentation, free milli-GPU left, free CPUs left, the free milli of the device a fraction should
        go to), smaller is better; None if the task's GPUs or CPUs do not fit. Memoized per (state, task)."""
        table = self.table(gpus, milli, cpus)
        if state in table:
            return table[state]
        model, free, node_cpus = self.keys[state]
        before = self.node_frag(model, free, node_cpus)
        cpus_after = node_cpus - cpus
        result: Fit | None = None
        if cpus_after < 0:
            pass
        elif gpus == 0:
            after = self.node_frag(model, free, cpus_after)
            result = (after - before, sum(free), cpus_after, GPU_MILLI)
        elif milli >= GPU_MILLI:
            if free.count(GPU_MILLI) >= gpus:
                # Sorted high to low, the whole free devices come first.
                after_free = free[gpus:] + (0,) * gpus
                after = self.node_frag(model, after_free, cpus_after)
                result = (after - before, sum(after_free), cpus_after, GPU_MILLI)
        else:
            for value in sorted({f for f in free if f >= milli}):
                i = free.index(value)
                after_free = free[:i] + (value - milli,) + free[i + 1:]
                after = self.node_frag(model, after_free, cpus_after)
                option = (after - before, sum(after_free), cpus_after, value)
                if result is None or option < result:
                    result = option
        table[state] = result
        return result


@functools.lru_cache(maxsize=8)
def scorer_for(mix: tuple[tuple[TaskShape, float], ...], cpu_weight: float = 0.0) -> FragScorer:
    """One scorer (and its memo) per task mix and CPU weight, shared by every cycle that uses them."""
    return FragScorer(mix, cpu_weight)
