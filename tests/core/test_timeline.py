"""The backfill timeline: the fast path for nodes without reservations agrees with the general walk."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import SchedulerConfig
from corral.core.model import Gpu, NodeSlice, NodeView
from corral.core.placement import Need, WorkNode
from corral.core.pool import WorkPool
from corral.core.timeline import INF, Openings, _stepwise_starts, _sweep, earliest_gang_start, feasible_starts

NOW = 1000.0


def work_node(index: int, gpus: int, free: int, releases: list[tuple[float, int]]) -> WorkNode:
    node = WorkNode(index, f"n{index}", tuple(Gpu(i) for i in range(gpus)), 32, 64_000, set(range(free)),
                    free_cpus=32 - 4 * len(releases), free_mem_mib=64_000, partitions=frozenset({"p"}))
    node.releases = [(t, g, 4, 0, job) for job, (t, g) in enumerate(releases)]
    return node


@st.composite
def nodes(draw, index: int = 0) -> WorkNode:
    gpus = draw(st.integers(1, 8))
    held = draw(st.lists(st.integers(1, 3), max_size=4))
    free = gpus - min(gpus, sum(held))
    releases, left = [], gpus - free
    for g in held:
        take = min(g, left)
        left -= take
        releases.append((NOW + draw(st.integers(1, 5000)), take))
    return work_node(index, gpus, free, releases)


@settings(max_examples=200, deadline=None)
@given(nodes(), st.integers(0, 8), st.integers(0, 32), st.integers(1, 10_000))
def test_nodes_without_reservations_take_the_fast_path_to_the_same_answer(node, gpus, cpus, duration) -> None:
    need = Need(gpus, cpus, 0)
    fast = feasible_starts(node, need, duration, NOW)
    assert fast == (_stepwise_starts(node, need, duration, NOW, "") if node.capacity_fits(need) else [])
    assert len(fast) <= 1 and all(end == INF for _, end in fast), "availability only rises"


def test_a_reservation_block_opens_a_gap_that_only_short_jobs_fit_before() -> None:
    node = work_node(0, 4, 4, [])
    node.blocks.append((NOW + 100, NOW + 200, 4, 0, 0))
    assert feasible_starts(node, Need(1, 0, 0), 50, NOW) == [(NOW, NOW + 50), (NOW + 200, INF)]
    assert feasible_starts(node, Need(1, 0, 0), 150, NOW) == [(NOW + 200, INF)]


def test_the_gang_starts_when_enough_nodes_are_free_on_the_most_recently_freed() -> None:
    early, late, never = work_node(0, 2, 0, [(NOW + 10, 2)]), work_node(1, 2, 0, [(NOW + 20, 2)]), \
        work_node(2, 1, 1, [])
    start, chosen = earliest_gang_start([early, late, never], Need(2, 0, 0), 2, 100, NOW)
    assert start == NOW + 20 and [n.name for n in chosen] == ["n1", "n0"]
    assert earliest_gang_start([early, late, never], Need(2, 0, 0), 3, 100, NOW) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(nodes(), min_size=1, max_size=6), st.integers(1, 8), st.integers(1, 10_000),
       st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4000), st.integers(1, 3000), st.integers(1, 4)),
                max_size=4))
def test_a_single_node_search_agrees_with_the_sweep(candidates, gpus, duration, blocks) -> None:
    for i, node in enumerate(candidates):
        node.index, node.name = i, f"n{i}"
    for which, start, length, g in blocks:  # reservations already placed on some nodes
        if which < len(candidates):
            candidates[which].blocks.append((NOW + start, NOW + start + length, g, 0, 0))
    need = Need(gpus, 0, 0)
    single = earliest_gang_start(candidates, need, 1, duration, NOW)
    swept = _sweep(candidates, need, 1, duration, NOW, "")
    assert (single and (single[0], [n.name for n in single[1]])) == (swept and (swept[0], [n.name for n in swept[1]]))


@settings(max_examples=200, deadline=None)
@given(st.lists(nodes(), min_size=1, max_size=6), st.lists(st.integers(1, 8), min_size=1, max_size=4),
       st.integers(1, 4), st.integers(1, 10_000), st.integers(0, 5))
def test_the_first_fit_memo_gives_the_sweeps_answers_without_it(candidates, gpus_asked, count, duration,
                                                                 blocked) -> None:
    """Gang searches of one cycle share a memo of when each node first holds a need; its answers are those
    of walking every node's releases each time, for repeated and different needs, with a node that holds a
    reservation (never memoized)."""
    for i, node in enumerate(candidates):
        node.index, node.name = i, f"n{i}"
    if blocked < len(candidates):
        candidates[blocked].blocks.append((NOW + 50, NOW + 500, 1, 0, 0))
    memo: dict = {}
    for gpus in gpus_asked * 2:
        need = Need(gpus, 0, 0)
        with_memo = earliest_gang_start(candidates, need, count, duration, NOW, "", memo)
        without = earliest_gang_start(candidates, need, count, duration, NOW, "")
        assert (with_memo and (with_memo[0], [n.name for n in with_memo[1]])) == \
            (without and (without[0], [n.name for n in without[1]]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 4)), min_size=2, max_size=6),
       st.lists(st.tuples(st.sampled_from(["sweep", "take", "block", "release"]), st.integers(0, 5),
                          st.integers(1, 2), st.integers(1, 2)), min_size=2, max_size=16))
def test_kept_openings_give_the_sweeps_answers_as_the_pool_changes_between_sweeps(shapes, steps) -> None:
    """The sweeps of one cycle keep their sorted openings (timeline.Openings) and patch them for the nodes in
    the pool's log of changes: starts, released what-ifs and reservation blocks between sweeps, of one need
    and of others, give the answers of a sweep built from scratch."""
    views = [NodeView(f"n{i}", tuple(Gpu(g) for g in range(gpus)), 32, 64_000, frozenset(range(min(free, gpus))),
                      32, 64_000, frozenset({"p"})) for i, (gpus, free) in enumerate(shapes)]
    pool = WorkPool(tuple(views), NOW, SchedulerConfig().placement_policy)
    members = pool.members["p"]
    openings = Openings(pool.changed if pool.changed is not None else [])
    taken: list[tuple[NodeSlice, int]] = []
    for job, (what, which, gpus, count) in enumerate(steps):
        node = members[which % len(members)]
        need = Need(gpus, 1, 0)
        if what == "sweep":
            kept = earliest_gang_start(members, need, count, 600, NOW, "", pool.first_fits, (openings, "p"))
            afresh = earliest_gang_start(list(members), need, count, 600, NOW, "")
            assert (kept and (kept[0], [n.name for n in kept[1]])) == \
                (afresh and (afresh[0], [n.name for n in afresh[1]]))
        elif what == "take" and node.fits_now(need):
            taken.append((pool.take(node, need, NOW + 100 * gpus, job), job))
        elif what == "block":
            pool.block(node, NOW + 10 * gpus, NOW + 300 * gpus, 1, 0, 0)
        elif what == "release" and taken:
            pool.release(*taken.pop())
