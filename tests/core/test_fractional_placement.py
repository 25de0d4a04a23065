"""Fractional GPUs (milli-GPU shares of one device) and GPU model constraints in placement, best fit and FGD."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import SchedulerConfig
from corral.core.fgd import FragScorer, model_matches
from corral.core.model import Gpu, NodeView, Request, TaskShape
from corral.core.placement.bestfit import BestFit
from corral.core.placement.fgd import with_scorer
from corral.core.pool import WorkPool
from corral.core.scheduler import schedule
from corral.core.worknode import Need

from .builders import NOW, job, node, snapshot

END = NOW + 3600


def view(name: str, gpus: int = 4, model: str = "A", cpus: int = 64, mem_mib: int = 512_000,
         shared: tuple[tuple[int, int], ...] = ()) -> NodeView:
    devices = tuple(Gpu(i, model) for i in range(gpus))
    return NodeView(name, devices, cpus, mem_mib, frozenset(range(gpus)) - {g for g, _ in shared}, cpus, mem_mib,
                    frozenset(("gpu",)), shared_gpus=shared)


def place(pool: WorkPool, need: Need, model: str = "", job_id: int = 1):
    nodes = pool.find_now("gpu", need, 1, END, None, model)
    return None if nodes is None else pool.take(nodes[0], need, END, job_id)


def test_fractions_pack_onto_one_device():
    pool = WorkPool((view("n1"),), NOW, BestFit)
    a = place(pool, Need(1, 1, 0, 300), job_id=1)
    b = place(pool, Need(1, 1, 0, 500), job_id=2)
    assert a.gpus == b.gpus and (a.gpu_milli, b.gpu_milli) == (300, 500)
    assert pool.nodes[0].shared == {a.gpus[0]: 800}
    c = place(pool, Need(1, 1, 0, 300), job_id=3)  # 200 left there: a new device
    assert c.gpus != a.gpus


def test_whole_gpu_request_never_takes_a_shared_device():
    pool = WorkPool((view("n1", gpus=2),), NOW, BestFit)
    shared = place(pool, Need(1, 1, 0, 100)).gpus[0]
    whole = place(pool, Need(1, 1, 0), job_id=2)
    assert whole.gpus != (shared,) and whole.gpu_milli == 1000
    assert place(pool, Need(1, 1, 0), job_id=3) is None  # the only other device is shared
    assert place(pool, Need(1, 1, 0, 900), job_id=4).gpus == (shared,)  # exactly 1000 milli now
    assert place(pool, Need(1, 1, 0, 1), job_id=5) is None


def test_best_fit_puts_a_fraction_on_the_tightest_shared_device():
    pool = WorkPool((view("roomy", shared=((0, 200),)), view("tight", shared=((1, 600),))), NOW, BestFit)
    piece = place(pool, Need(1, 1, 0, 300))
    assert (piece.node, piece.gpus) == ("tight", (1,))


def test_release_gives_the_device_back_when_the_last_sharer_leaves():
    pool = WorkPool((view("n1", gpus=1),), NOW, BestFit)
    a, b = place(pool, Need(1, 1, 0, 400), job_id=1), place(pool, Need(1, 1, 0, 400), job_id=2)
    pool.release(a, 1)
    assert pool.nodes[0].shared == {0: 400} and not pool.nodes[0].free
    pool.release(b, 2)
    assert pool.nodes[0].shared == {} and pool.nodes[0].free == {0}
    assert place(pool, Need(1, 1, 0), job_id=3).gpus == (0,)


def test_model_constraint_with_alternatives():
    pool = WorkPool((view("a", model="A"), view("b", model="B"), view("c", model="C")), NOW, BestFit)
    assert place(pool, Need(1, 1, 0, 500), model="C").node == "c"
    assert place(pool, Need(1, 1, 0), model="X|B").node == "b"
    assert place(pool, Need(1, 1, 0), model="X") is None
    assert model_matches("A", "") and model_matches("B", "A|B") and not model_matches("AB", "A|B")


def test_request_validates_fractions():
    assert Request(gpus_per_node=1, gpu_milli=250).gpu_amount == 0.25
    with pytest.raises(ValueError, match="exactly one GPU"):
        Request(gpus_per_node=2, gpu_milli=500)
    with pytest.raises(ValueError):
        Request(gpus_per_node=1, gpu_milli=0)


def test_cycle_starts_fractional_jobs_and_charges_quota_by_share():
    snap = snapshot(nodes=[node("n1", gpus=1)],
                    pending=[_share_job(i, 500) for i in (1, 2, 3)])
    plan = schedule(snap, SchedulerConfig())
    assert [s.job_id for s in plan.starts] == [1, 2]
    assert {s.slices[0].gpus for s in plan.starts} == {(0,)}
    assert all(s.slices[0].gpu_milli == 500 for s in plan.starts)


def _share_job(job_id: int, milli: int):
    return replace(job(job_id), request=Request(gpus_per_node=1, gpu_milli=milli, partition="gpu"))


def test_cycle_with_fgd_placement_keeps_whole_devices_for_the_mix():
    mix = ((TaskShape(2, 1000), 1.0),)
    snap = snapshot(nodes=[node("n1", gpus=2), node("n2", gpus=3)], pending=[job(1, gpus=1)])
    plan = schedule(snap, SchedulerConfig(placement="fgd", task_mix=mix))
    # On n1 the 1-GPU job would leave 1 GPU no 2-GPU task can use; on n2 it leaves 2.
    assert plan.starts[0].slices[0].node == "n2"
    with pytest.raises(ValueError, match="placement"):
        SchedulerConfig(placement="worst")


def test_fgd_fragmentation_by_hand():
    # Mix: half 1 x 500 milli (4 CPUs), half 2 whole GPUs (8 CPUs).
    scorer = FragScorer(((TaskShape(1, 500, 4), 1.0), (TaskShape(2, 1000, 8), 1.0), (TaskShape(0, 1000, 2), 5.0)))
    # free (1000, 300, 0), 16 CPUs: the 500 task fits (300 is fragment); the 2-GPU task does not (all 1300).
    assert scorer.node_frag("A", (1000, 300, 0), 16) == pytest.approx(0.5 * 300 + 0.5 * 1300)
    # 6 CPUs: the 2-GPU task lacks CPU too; the 500 task still fits.
    assert scorer.node_frag("A", (300, 1000, 0), 6) == pytest.approx(0.5 * 300 + 0.5 * 1300)
    # 3 CPUs: nothing fits, everything is fragment.
    assert scorer.node_frag("A", (1000, 300), 3) == pytest.approx(1300)
    # A 500-milli task on (1000, 1000, 600), 16 CPUs: on the 600 device -> (1000, 1000, 100):
    # frag 0.5*100 + 0.5*100 = 100; on a whole device -> (1000, 600, 500): 0.5*0 + 0.5*1100.
    before = scorer.node_frag("A", (1000, 1000, 600), 16)
    delta, _, _, device_room = scorer.best(scorer.intern(("A", (1000, 1000, 600), 16)), 1, 500, 4)
    assert device_room == 600 and delta == pytest.approx(100 - before)


def test_fgd_cpu_stranded_fragmentation_by_hand():
    # One typical task: 1 whole GPU with 4 CPUs. 4 free GPUs but 8 CPUs: 4 copies fit the GPUs, CPUs for 2.
    plain = FragScorer(((TaskShape(1, 1000, 4), 1.0),))
    cpu = FragScorer(((TaskShape(1, 1000, 4), 1.0),), cpu_weight=0.3)
    assert plain.node_frag("A", (1000,) * 4, 8) == 0.0  # FGD: the task fits, nothing is fragment
    # Short of CPUs for 1 - 8 / (4 x 4) = 1/2 of the copies: 0.3 x 1/2 x 4000.
    assert cpu.node_frag("A", (1000,) * 4, 8) == pytest.approx(600)
    assert cpu.node_frag("A", (1000,) * 4, 16) == 0.0  # enough CPUs for every copy
    assert cpu.node_frag("A", (1000,) * 4, 3) == pytest.approx(4000)  # does not fit at all: all fragment
    # A 500-milli task with 4 CPUs on (1000, 1000, 400), 8 CPUs: 400 is fragment (too small); the two whole
    # devices hold 2 copies each, CPUs for 2 of the 4: 400 + 0.3 x 1/2 x 2000.
    half = FragScorer(((TaskShape(1, 500, 4), 1.0),), cpu_weight=0.3)
    assert half.node_frag("A", (1000, 400, 1000), 8) == pytest.approx(700)
    # A 2-GPU task (8 CPUs) on 5 free GPUs, 12 CPUs: 2 copies, CPUs for 1.5 of them; FGD's usable capacity
    # is all 5 devices, so 0.5 x (1 - 12/16) x 5000.
    pair = FragScorer(((TaskShape(2, 1000, 8), 1.0),), cpu_weight=0.5)
    assert pair.node_frag("A", (1000,) * 5, 12) == pytest.approx(0.5 * (1 - 12 / 16) * 5000)
    with pytest.raises(ValueError):
        FragScorer((), cpu_weight=-1)
    with pytest.raises(ValueError, match="fgd_cpu_weight"):
        SchedulerConfig(placement="fgd+cpu", fgd_cpu_weight=-0.1)


def test_fgd_cpu_keeps_cpus_for_the_gpus_left():
    # Typical task: 1 GPU, 4 CPUs. A 1-GPU job with 6 CPUs: on n1 (3 GPUs, 12 CPUs) it leaves 2 GPUs and
    # 6 CPUs, enough for one typical task but not two; on n2 (4 GPUs, 40 CPUs) plenty. Plain FGD sees no
    # fragment either way and packs (n1, fewer free GPUs left); fgd+cpu counts n1's stranded GPU
    # (delta 0.3 x 1/4 x 2000 = 150 against 0) and takes n2.
    mix = ((TaskShape(1, 1000, 4), 1.0),)
    snap = snapshot(nodes=[node("n1", gpus=3, cpus=12), node("n2", gpus=4, cpus=40)], pending=[job(1, cpus=6)])
    assert schedule(snap, SchedulerConfig(placement="fgd", task_mix=mix)).starts[0].slices[0].node == "n1"
    plan = schedule(snap, SchedulerConfig(placement="fgd+cpu", task_mix=mix))
    assert plan.starts[0].slices[0].node == "n2"
    scorer = FragScorer(mix, cpu_weight=0.3)
    delta = scorer.best(scorer.intern(("", (1000, 1000, 1000), 12)), 1, 1000, 6)[0]
    assert delta == pytest.approx(150)


def _cluster(sizes):
    return tuple(view(f"n{i}", gpus=g, model="AB"[i % 2], cpus=c, mem_mib=m) for i, (g, c, m) in enumerate(sizes))


requests = st.tuples(st.integers(0, 3), st.sampled_from([1000, 1000, 100, 250, 500, 700, 999]),
                     st.integers(0, 16), st.integers(0, 64_000), st.sampled_from(["", "A", "B", "A|B"]))


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 8), st.integers(8, 64), st.integers(64_000, 256_000)),
                      min_size=1, max_size=6),
       reqs=st.lists(requests, min_size=1, max_size=40), fgd=st.sampled_from([None, 0.0, 0.3]))
def test_no_device_over_1000_milli_and_constraints_hold(sizes, reqs, fgd):
    views = _cluster(sizes)
    mix = ((TaskShape(1, 500, 4), 0.5), (TaskShape(2, 1000, 8), 0.5))
    pool = WorkPool(views, NOW, with_scorer(FragScorer(mix, fgd)) if fgd is not None else BestFit)
    use: dict[tuple[str, int], int] = {}
    cpus: dict[str, int] = {}
    mem: dict[str, int] = {}
    for job_id, (gpus, milli, c, m, model) in enumerate(reqs):
        if milli < 1000 and gpus != 1:
            milli = 1000
        need = Need(gpus, c, m, milli)
        piece = place(pool, need, model, job_id)
        if piece is None:
            continue
        node = pool.by_name[piece.node]
        assert model_matches(node.gpu_model, model)
        assert len(piece.gpus) == gpus and len(set(piece.gpus)) == gpus
        for g in piece.gpus:
            use[(piece.node, g)] = use.get((piece.node, g), 0) + milli
        cpus[piece.node] = cpus.get(piece.node, 0) + c
        mem[piece.node] = mem.get(piece.node, 0) + m
    for used in use.values():
        assert used <= 1000
    for v in views:
        assert cpus.get(v.name, 0) <= v.cpus and mem.get(v.name, 0) <= v.mem_mib
        node = pool.by_name[v.name]
        # The pool's own books agree with what was handed out.
        assert {g for (n, g) in use if n == v.name} == {g.index for g in v.gpus} - node.free
        assert all(node.shared[g] == use[(v.name, g)] for g in node.shared)
