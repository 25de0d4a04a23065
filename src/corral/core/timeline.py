"""The backfill timeline: when could a blocked gang start, given running jobs' ends and reservations.

Each node's availability is a step function of time: it rises when a running job's time limit runs out
and falls for the span of every reservation already placed on it. For one node, the start times that
give `need` a window of `duration_s` form a union of closed intervals; a gang of k nodes can start at
the earliest instant covered by k nodes' intervals (a sweep over interval endpoints).
"""
from __future__ import annotations

import math

from corral.core.worknode import Need, WorkNode

INF = math.inf


# Per node index, per need (gpus, cpus, mem_mib): when a node without reservations first holds the need
# (-inf: now; None: never). A cycle's pool keeps one (NodePool.first_fits) and forgets a node's entries
# whenever its free resources or releases change, so the gang sweeps of one cycle, which mostly ask the same
# per-node need of every node, walk each node's releases once.
FirstFits = dict[int, dict[tuple[int, int, int], float | None]]


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
        known = memo.get(node.index)
        if known is None:
            known = memo[node.index] = {}
        key = (need.gpus, need.cpus, need.mem_mib)
        if key in known:
            first = known[key]
        else:
            first = known[key] = _monotone_first(node, need)
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
    """`_monotone_starts` without `now`: the release after which `need` fits (-inf: it fits now; None: never)."""
    if node.fits_whole_free(need):
        return -INF
    g, c, m = len(node.free), node.free_cpus, node.free_mem_mib
    for t, dg, dc, dm, _ in sorted(node.releases):
        g, c, m = g + dg, c + dc, m + dm
        if g >= need.gpus and c >= need.cpus and m >= need.mem_mib:
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
    memo: FirstFits | None = None,
) -> tuple[float, list[WorkNode]] | None:
    """The earliest time at which `count` of `candidates` can each hold `need` for `duration_s`,
    and which nodes (best fit: those that became available most recently, so long-idle nodes stay
    free for others; ties by node order). None if that never happens."""
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
            known = memo.get(node.index)
            if known is None:
                known = memo[node.index] = {}
            first = known[key] if key in known else known.setdefault(key, _monotone_first(node, need))
            if first is not None:
                events.append((max(first, now), 0, pos))
            continue
        for a, b in feasible_starts(node, need, duration_s, now, reservation, memo):
            events.append((a, 0, pos))
            if b != INF:
                events.append((b, 1, pos))
    events.sort()
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
