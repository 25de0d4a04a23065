import pytest

from corral.sim.traces import TraceFormatError, fgd, fgd_curves
from corral.sim.workload import Workload

from .builders import job, needs

CAPACITY_MILLI = 6_212_000


def test_golden_sequence_is_the_authors_order(openb_pods):
    seq = fgd.golden_sequence(openb_pods, CAPACITY_MILLI)
    assert len(seq.arrivals) == 10_866
    assert seq.copies == 2_714
    names = [a.name for a in seq.arrivals]
    assert names[:3] == ["openb-pod-0255", "openb-pod-1685", "openb-pod-6784"]
    assert names[8_152] == "openb-pod-3888-tuned-0"  # copies follow the 8,152 shuffled originals
    assert names[-1] == "openb-pod-5877-tuned-2713"
    assert seq.arrived_gpu_milli == 8_075_080  # <= 1.3 x 6,212,000 = 8,075,600
    assert seq.arrived_pct() == pytest.approx(129.9916, abs=1e-4)
    assert len({a.name for a in seq.arrivals[:8_152]}) == 8_152  # every original exactly once


def test_golden_workload_keeps_names_and_never_ends(openb_pods):
    w = fgd.golden_sequence(openb_pods, CAPACITY_MILLI).to_workload(gap_s=2.0)
    assert len(w) == 10_866
    assert w.jobs[1].submit_s == 2.0
    assert w.jobs[-1].name == "openb-pod-5877-tuned-2713"
    assert min(j.duration_s for j in w.jobs) == fgd.STAY_FOREVER_S


def test_golden_sequence_refuses_another_pod_list(openb_pods):
    needs(fgd.GOLDEN_PATH)
    other = Workload(openb_pods.jobs[1:], "fewer", "test")
    with pytest.raises(TraceFormatError, match=r"is not in the pod list"):
        fgd.golden_sequence(other, CAPACITY_MILLI)


def test_golden_run_reproduces_the_published_fgd_curves(golden_rows):
    arrived = [r.arrived_gpu_milli for r in golden_rows]
    allocation = fgd_curves.allocation_curve(arrived, [r.used_gpu_milli for r in golden_rows], 6_212)
    frag = fgd_curves.fragmentation_curve(arrived, [r.frag_milli for r in golden_rows], 6_212)
    assert allocation == fgd_curves.read_expected()[("06-FGD", 42)]
    assert frag == fgd_curves.read_expected(fgd_curves.FRAGMENTATION_PATH)[("06-FGD", 42)]
    assert allocation[130] == 95.29
    assert sum(1 for r in golden_rows if r.node is None) == 2_532
    assert golden_rows[0].node == "openb-node-0260"


def test_published_means_at_130_percent():
    expected = fgd_curves.read_expected(needs(fgd_curves.ALLOCATION_PATH))
    means = {p: round(fgd_curves.mean_at(expected, p), 2) for p in ("01-Random", "06-FGD")}
    assert means == {"01-Random": 87.47, "06-FGD": 95.39}


def test_curve_rounding_and_neighbour_fallback():
    # 10 GPUs: arrived 0, 1.5 % (rounds half-to-even to 2), 3 %; no arrival at 1 % -> mean of 0..2.
    curve = fgd_curves.allocation_curve([0, 150, 300], [0, 100, 300], 10)
    assert curve[0] == 0.0
    assert curve[1] == 0.5  # mean of 0 and 1 (the arrivals at 0 % and 2 %)
    assert curve[2] == 1.0
    assert curve[3] == 3.0
    assert curve[4] == 3.0  # fallback to 3..5
    assert 6 not in curve


def _pods(*milli_by_name):
    return Workload(tuple(job(i, gpus=1 if m else 0, gpu_milli=m, name=f"pod-{i}")
                          for i, m in enumerate(milli_by_name)), "pods", "test")


def test_numpy_procedure_inflates_to_the_target_and_is_deterministic():
    pods = _pods(1000, 500, 0, 250)
    seq = fgd.arrival_sequence(pods, capacity_gpu_milli=2000, seed=7, ratio=1.3)
    assert seq.arrived_gpu_milli <= 2600
    assert seq.copies > 0
    assert {a.name for a in seq.arrivals[:4]} == {"pod-0", "pod-1", "pod-2", "pod-3"}
    assert [a.name.split("-tuned-")[1] for a in seq.arrivals[4:]] == [str(i) for i in range(seq.copies)]
    again = fgd.arrival_sequence(pods, capacity_gpu_milli=2000, seed=7, ratio=1.3)
    assert [a.name for a in again.arrivals] == [a.name for a in seq.arrivals]
    other = fgd.arrival_sequence(pods, capacity_gpu_milli=2000, seed=8, ratio=1.3)
    assert [a.name for a in other.arrivals] != [a.name for a in seq.arrivals]


def test_numpy_procedure_removes_pods_above_the_target():
    seq = fgd.arrival_sequence(_pods(1000, 1000, 1000, 1000), capacity_gpu_milli=2000, seed=1, ratio=1.0)
    assert seq.arrived_gpu_milli == 2000
    assert len(seq.arrivals) == 2


def test_numpy_sequences_on_the_real_pods_land_just_below_130_percent(openb_pods):
    seq = fgd.sequence(openb_pods, CAPACITY_MILLI, seed=43)
    assert "numpy" in seq.method
    assert 129.9 < seq.arrived_pct() <= 130.0
    assert 10_500 < len(seq.arrivals) < 11_200


def test_cpu_only_pods_cannot_be_inflated():
    with pytest.raises(ValueError, match="no pod requests a GPU"):
        fgd.arrival_sequence(_pods(0, 0), capacity_gpu_milli=1000, seed=1)
