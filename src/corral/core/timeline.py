"""The backfill timeline: when could a blocked gang start, given running jobs' ends and reservations.

Each node's availability is a step function of time: it rises when a running job's time limit runs out
and falls for the span of every reservation already placed on it. For one node, the start times that
give `need` a window of `duration_s` form a union of closed intervals; a gang of k nodes can start at
the earliest instant covered by k nodes' intervals (a sweep over interval endpoints).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from corral.core.worknode import Need, WorkNode

INF = math.inf


# Per node index, per need (gpus, cpus, mem_mib): when a node without reservations first holds the need
# (-inf: now; None: never). A cycle's pool keeps one (NodePool.first_fits) and forgets a node's entries
# whenever its free resources or releases change, so the gang sweeps of one cycle, which mostly ask the same
# per-node need of every node, walk each node's releases once; a fork of the engine's base pool shares the
# base's entries of the nodes it does not change, so later cycles do not walk those again either.
FirstFits = dict[int, dict[tuple[int, int, int], float | None]]
# The engine's base pool keeps a node's entries across cycles until the node changes (core/basepool.py): a
# node that never changes would gather one per need ever swept, so past this many they start again.
NEEDS_KEPT = 32


# An opening of a node's feasible interval in a sweep: (time, 0, position in the candidates); a closing has 1.
Event = tuple[float, int, int]


class Openings:
    """The sweeps' events of one cycle, kept between sweeps: per (scope, need) the sorted openings of the
    candidates whose availability only rises (no reservation block, no advance reservation), and the
    positions of the others (walked in full each sweep). The gang sweeps of a cycle (one per reservation)
    mostly ask the same need of the same 10,000 nodes, while between two of them only the nodes that a
    start, a what-if or a block touched change: those come from the pool's log of changed node indices
    (NodePool.changed) and are the only ones computed again. A scope's candidates must be one list object
    for the whole cycle (a partition's members), which may have its node records replaced in place."""

    def __init__(self, changed: list[int]) -> None:
        self.changed = changed
        self._kept: dict[tuple[object, ...], _Kept] = {}

    def events(self, scope: object, candidates: list[WorkNode], need: Need, now: float,
               memo: FirstFits) -> tuple[list[Event], list[int]]:
        """A new list of the monotone candidates' openings, sorted, and the positions of the rest."""
        key = (scope, need.gpus, need.cpus, need.mem_mib)
        kept = self._kept.get(key)
        if kept is None or kept.candidates is not candidates or kept.now != now:
            positions = {node.index: pos for pos, node in enumerate(candidates)}
            opened, general = _classify(candidates, range(len(candidates)), need, now, memo)
            opened.sort()
            kept = self._kept[key] = _Kept(candidates, now, len(self.changed), positions, opened, general)
        elif kept.seen < len(self.changed):
            dirty = {kept.positions[i] for i in self.changed[kept.seen:] if i in kept.positions}
            opened = [event for event in kept.opened if event[2] not in dirty]
            again, more = _classify(candidates, dirty, need, now, memo)
            opened.extend(again)
            opened.sort()  # a sorted run and a short tail: one merge
            kept.opened, kept.general, kept.seen = opened, (kept.general - dirty) | more, len(self.changed)
        return list(kept.opened), sorted(kept.general)


@dataclass(slots=True)
class _Kept:
    candidates: list[WorkNode]
    now: float
    seen: int  # how much of the pool's log of changed nodes is folded in
    positions: dict[int, int]  # node index -> position in candidates
    opened: list[Event]  # sorted
    general: set[int]  # positions of candidates with reservations


def _classify(candidates: list[WorkNode], positions: Iterable[int], need: Need, now: float,
              memo: FirstFits) -> tuple[list[Event], set[int]]:
    """The openings of the candidates at `positions` that have no reservation (through the memo of first
    fits), and the positions of those that have one. Candidates that can never hold the need are left out.
    A cycle's first sweep runs this for every node of the partition: the node tests are written out here
    (WorkNode.capacity_fits, max) rather than called."""
    key = (need.gpus, need.cpus, need.mem_mib)
    gpus, cpus, mem_mib = key
    opened: list[Event] = []
    general: set[int] = set()
    add_opening = opened.append
    for pos in positions:
        node = candidates[pos]
        if len(node.gpus) < gpus or node.cpus < cpus or node.mem_mib < mem_mib:
            continue
        if node.blocks or node.advance:
            general.add(pos)
            continue
        known = memo.get(node.index)
        if known is None:
            first = _monotone_first(node, need)
            memo[node.index] = {key: first}
        elif key in known:
            first = known[key]
        else:
            if len(known) >= NEEDS_KEPT:
                known.clear()
            first = known[key] = _monotone_first(node, need)
        if first is not None:
            add_opening((first if first > now else now, 0, pos))
    return opened, general


def _first_fit(memo: FirstFits, node: WorkNode, need: Need, key: tuple[int, int, int]) -> float | None:
    """When `node` (no reservation on it) first holds `need`, through the memo (key: the need's three)."""
    known = memo.get(node.index)
    if known is None:
        first = _monotone_first(node, need)
        memo[node.index] = {key: first}
        return first
    if key in known:
        return known[key]
    if len(known) >= NEEDS_KEPT:
        known.clear()
    first = known[key] = _monotone_first(node, need)
    return first


def feasible_starts(node: WorkNode, need: Need, duration_s: float, now: float,
                    reservation: str = "", memo: FirstFits | None = None) -> list[tuple[float, float]]:
    """Closed intervals of start times at which `need` fits on `node` for `duration_s` seconds."""
    if not node.capacity_fits(need):
        return []
    return _starts_within_capacity(node, need, duration_s, now, reservation, memo)


def _starts_within_capacity(node: WorkNode, need: Need, duration_s: float, now: float,
                            reservation: str, memo: FirstFits | None = None) -> list[tuple[float, float]]:
    if not node.blocks and not node.advance:
        if memo is None:
            return _monotone_starts(node, need, now)
        first = _first_fit(memo, node, need, (need.gpus, need.cpus, need.mem_mib))
        return [] if first is None else [(max(first, now), INF)]
    return _stepwise_starts(node, need, duration_s, now, reservation)


def _stepwise_starts(node: WorkNode, need: Need, duration_s: float, now: float,
                     reservation: str) -> list[tuple[float, float]]:
    """The general case: walk the node's availability step function (releases up, reservation blocks
    down and up again) and take the complement of the spans that cannot hold `need`."""
    deltas: list[tuple[float, int, int, int]] = [(t, g, c, m) for t, g, c, m, _ in node.releases]
    for start, end, g, c, m in node.blocks:
        deltas.append((start, -g, -c, -m))
        deltas.append((end, g, c, m))
    deltas.sort()
    g, c, m = len(node.free), node.free_cpus, node.free_mem_mib
    # Walk the step function, collecting spans where the node cannot hold `need`.
    blocked: list[tuple[float, float]] = []
    segment_start = now
    i = 0
    while True:
        while i < len(deltas) and deltas[i][0] <= segment_start:
            _, dg, dc, dm = deltas[i]
            g, c, m = g + dg, c + dc, m + dm
            i += 1
        segment_end = deltas[i][0] if i < len(deltas) else INF
        if g < need.gpus or c < need.cpus or m < need.mem_mib:
            if segment_end == INF:
                # Only reachable if reservations exceed capacity forever, which placement never does.
                blocked.append((segment_start, INF))
            else:
                blocked.append((segment_start, segment_end))
        if segment_end == INF:
            break
        segment_start = segment_end
    for a_start, a_end, name, maintenance in node.advance:
        if maintenance or name != reservation:
            blocked.append((a_start, a_end))
    blocked.sort()
    return _complement(blocked, duration_s, now)


def _monotone_first(node: WorkNode, need: Need) -> float | None:
    """`_monotone_starts` without `now`: the release after which `need` fits (-inf: it fits now; None: never).
    Run once per node and need in a cycle's first sweep: WorkNode.fits_whole_free is written out."""
    g, c, m = len(node.free), node.free_cpus, node.free_mem_mib
    gpus, cpus, mem_mib = need.gpus, need.cpus, need.mem_mib
    if g >= gpus and c >= cpus and m >= mem_mib:
        return -INF
    for t, dg, dc, dm, _ in sorted(node.releases):
        g, c, m = g + dg, c + dc, m + dm
        if g >= gpus and c >= cpus and m >= mem_mib:
            return t
    return None


def _monotone_starts(node: WorkNode, need: Need, now: float) -> list[tuple[float, float]]:
    """Without reservations a node's availability only rises, so `need` fits for any duration from the
    first instant it fits at all: one interval [t, inf) (or none). The common case, walked without
    building and sorting the general step function."""
    if node.fits_whole_free(need):
        return [(now, INF)]
    g, c, m = len(node.free), node.free_cpus, node.free_mem_mib
    for t, dg, dc, dm, _ in sorted(node.releases):
        g, c, m = g + dg, c + dc, m + dm
        if g >= need.gpus and c >= need.cpus and m >= need.mem_mib:
            return [(max(t, now), INF)]
    return []


def _complement(blocked: list[tuple[float, float]], duration_s: float, now: float) -> list[tuple[float, float]]:
    """Start times t >= now whose window [t, t + duration) touches no blocked span [s, e)."""
    intervals: list[tuple[float, float]] = []
    cursor = now
    for s, e in blocked:  # already in time order
        bad_from, bad_to = s - duration_s, e  # t in (bad_from, bad_to) overlaps [s, e)
        if bad_from >= cursor:
            intervals.append((cursor, bad_from))
        cursor = max(cursor, bad_to)
        if cursor == INF:
            return intervals
    intervals.append((cursor, INF))
    return intervals


def earliest_gang_start(
    candidates: list[WorkNode], need: Need, count: int, duration_s: float, now: float, reservation: str = "",
    memo: FirstFits | None = None, openings: tuple[Openings, object] | None = None,
) -> tuple[float, list[WorkNode]] | None:
    """The earliest time at which `count` of `candidates` can each hold `need` for `duration_s`,
    and which nodes (best fit: those that became available most recently, so long-idle nodes stay
    free for others; ties by node order). None if that never happens. With `openings` (the cycle's
    Openings and the scope `candidates` is for) and `memo`, the sweep reuses the openings kept since
    the last sweep of the same need (a single node is then the sweep's first opening, the same answer)."""
    if openings is not None and memo is not None:
        kept, scope = openings
        events, general = kept.events(scope, candidates, need, now, memo)
        for pos in general:
            for a, b in feasible_starts(candidates[pos], need, duration_s, now, reservation, memo):
                events.append((a, 0, pos))
                if b != INF:
                    events.append((b, 1, pos))
        events.sort()
        return _first_open(events, candidates, count)
    if count == 1:
        return _earliest_single(candidates, need, duration_s, now, reservation, memo)
    return _sweep(candidates, need, count, duration_s, now, reservation, memo)


def _earliest_single(candidates: list[WorkNode], need: Need, duration_s: float, now: float,
                     reservation: str, memo: FirstFits | None = None) -> tuple[float, list[WorkNode]] | None:
    """One node: the sweep's answer is the node whose first feasible start is earliest (ties by node
    order). A node that does not fit now cannot fit before its first release (reservations only take
    away), which skips most nodes without walking their timelines."""
    best_t, best = INF, None
    for node in candidates:
        if not node.capacity_fits(need):
            continue
        if node.releases and min(node.releases)[0] >= best_t and not node.fits_whole_free(need):
            continue
        starts = _starts_within_capacity(node, need, duration_s, now, reservation, memo)
        if starts and starts[0][0] < best_t:
            best_t, best = starts[0][0], node
    return None if best is None else (best_t, [best])


def _sweep(candidates: list[WorkNode], need: Need, count: int, duration_s: float, now: float,
           reservation: str, memo: FirstFits | None = None) -> tuple[float, list[WorkNode]] | None:
    """A sweep over every node's feasible start intervals, earliest first, until `count` are open."""
    events: list[tuple[float, int, int]] = []  # (time, 0 = opens / 1 = closes, node index in candidates)
    key = (need.gpus, need.cpus, need.mem_mib)
    for pos, node in enumerate(candidates):
        if memo is not None and not node.blocks and not node.advance:
            # feasible_starts through the memo, inlined: this runs for every node of the partition.
            if not node.capacity_fits(need):
                continue
            first = _first_fit(memo, node, need, key)
            if first is not None:
                events.append((max(first, now), 0, pos))
            continue
        for a, b in feasible_starts(node, need, duration_s, now, reservation, memo):
            events.append((a, 0, pos))
            if b != INF:
                events.append((b, 1, pos))
    events.sort()
    return _first_open(events, candidates, count)


def _first_open(events: list[Event], candidates: list[WorkNode], count: int) -> tuple[float, list[WorkNode]] | None:
    """The first instant at which `count` intervals are open, in sorted events, and the nodes."""
    open_since: dict[int, float] = {}
    for i, (t, kind, pos) in enumerate(events):
        if kind == 0:
            open_since[pos] = t
        else:
            open_since.pop(pos, None)
            continue
        # Several intervals may open at the same instant: decide after the last of them.
        if i + 1 < len(events) and events[i + 1][0] == t and events[i + 1][1] == 0:
            continue
        if len(open_since) >= count:
            ranked = sorted(open_since.items(), key=lambda item: (-item[1], item[0]))
            return t, [candidates[pos] for pos, _ in ranked[:count]]
    return None
