"""The engine's base pool keeps each node's first-fit entries (when the node first holds a need) across
cycles, filled by the forks' sweeps for nodes they did not change: a change the base makes to a node between
cycles (a job's end moved, a job gone, a job started) must renew that node's entries, or the next cycle's
reservation is planned on the node as it was."""
from __future__ import annotations

from dataclasses import replace

import pytest

from corral.core.basepool import BasePool
from corral.core.model import NodeSlice
from corral.core.scheduler import schedule
from tests.core.builders import NOW, job, node, running, snapshot


def _cluster():
    nodes = [node(f"n{i}", gpus=4) for i in range(6)]
    runs = [running(10 + i, 100 * (i + 1), (f"n{i}", (0, 1, 2, 3))) for i in range(6)]
    return nodes, runs


def _with_base(snap):
    base = BasePool(snap.nodes)
    for r in snap.running:
        base.note_running(r.id, r.slices, r.expected_end)
    return replace(snap, base=base)


def _estimate(plan) -> float:
    (wait,) = plan.waiting
    return wait.estimated_start


@pytest.mark.parametrize("change", ["retime", "unhold", "hold"])
def test_a_node_the_base_changed_between_cycles_is_swept_afresh(change: str) -> None:
    nodes, runs = _cluster()
    gang = [job(1, nodes=2, gpus=4, limit_s=500)]
    snap = _with_base(snapshot(nodes, gang, runs))
    assert _estimate(schedule(snap)) == NOW + 200  # n0 and n1; every node's entry is now in the base
    assert _estimate(schedule(snap)) == NOW + 200
    base = snap.base
    assert base is not None
    if change == "retime":  # n1's job runs to +900, n5's ends at +50: n0 and n5 at +100
        base.retime(11, NOW + 900)
        base.retime(15, NOW + 50)
        runs = [replace(r, expected_end=NOW + {11: 900, 15: 50}.get(r.id, r.expected_end - NOW)) for r in runs]
        want = NOW + 100
    elif change == "unhold":  # n1's job is gone: n0 at +100
        base.unhold(11)
        runs = [r for r in runs if r.id != 11]
        want = NOW + 100
    else:  # n0 ended, and a new job holds it until +1000: n1 and n2 at +300
        base.unhold(10)
        base.hold(20, (NodeSlice("n0", (0, 1, 2, 3), 1, 0),), NOW + 1000)
        runs = [running(20, 1000, ("n0", (0, 1, 2, 3)))] + [r for r in runs if r.id != 10]
        want = NOW + 300
    again = replace(snap, running=tuple(runs))
    from_views = schedule(snapshot(nodes, gang, runs))
    assert _estimate(from_views) == want
    assert schedule(again).waiting == from_views.waiting


def test_a_job_past_its_end_moves_its_nodes_release_to_now_in_the_fork_not_the_base() -> None:
    nodes, runs = _cluster()
    one = [job(1, nodes=1, gpus=4, limit_s=500)]
    snap = _with_base(snapshot(nodes, one, runs))
    assert _estimate(schedule(snap)) == NOW + 100  # n0's job ends at +100
    later = replace(snap, now=NOW + 150)  # it is late now: its GPUs are due "soon", at now + 1
    from_views = schedule(snapshot(nodes, one, runs, now=NOW + 150))
    assert _estimate(from_views) == NOW + 151
    assert schedule(later).waiting == from_views.waiting
    assert _estimate(schedule(snap)) == NOW + 100, "the base's own entry for n0 is still its raw end"
