"""Metrics on a hand-computed case: capacity 4 GPUs,
A 2 GPUs submit 0 runs [0, 10]; B 3 GPUs submit 0 runs [10, 20]; C 1 GPU submit 5 runs [5, 25];
D half a GPU submit 10 runs [20, 30]. GPUs in use: 2 (0-5), 3 (5-10), 4 (10-20), 1.5 (20-25), 0.5 (25-30)
= 75 GPU-seconds over 30 s."""
import json

import pytest

from corral.sim.metrics import JobResult, Stats, compute_metrics, size_bucket

from .builders import job, ran

A = job(1, submit_s=0, duration_s=10, gpus=2, queue="a")
B = job(2, submit_s=0, duration_s=10, gpus=3, queue="b")
C = job(3, submit_s=5, duration_s=20, gpus=1, queue="a")
D = job(4, submit_s=10, duration_s=10, gpus=1, gpu_milli=500, queue="b")
RESULTS = [ran(A, 0), ran(B, 10), ran(C, 5), ran(D, 20, preemptions=1)]


@pytest.fixture
def metrics():
    return compute_metrics(RESULTS, 4, entitlements={"a": 2, "b": 2})


def test_overall_jct_and_wait(metrics):
    assert metrics.jobs == 4
    assert metrics.makespan_s == 30
    assert metrics.overall.jct_s == Stats(count=4, mean=17.5, median=20, p95=20, p99=20, max=20)
    assert metrics.overall.wait_s == Stats(count=4, mean=5, median=5, p95=10, p99=10, max=10)


def test_percentiles_interpolate_linearly():
    assert Stats.of([40, 0, 30, 10, 20]) == Stats(count=5, mean=20, median=20, p95=38, p99=pytest.approx(39.6),
                                                  max=40)
    assert Stats.of([]).count == 0


def test_per_queue_and_per_size(metrics):
    assert metrics.by_queue["a"].jct_s.mean == 15 and metrics.by_queue["a"].wait_s.mean == 0
    assert metrics.by_queue["b"].jct_s.mean == 20 and metrics.by_queue["b"].wait_s.mean == 10
    assert list(metrics.by_size) == ["<1", "1", "2-4"]
    assert metrics.by_size["2-4"].jct_s.count == 2
    assert metrics.by_size["<1"].wait_s.mean == 10


@pytest.mark.parametrize("gpus, bucket", [(0, "0"), (0.46, "<1"), (1, "1"), (2, "2-4"), (4, "2-4"), (5, "5-8"),
                                          (8, "5-8"), (9, "9-32"), (32, "9-32"), (33, ">32"), (256, ">32")])
def test_size_buckets(gpus, bucket):
    assert size_bucket(gpus) == bucket


def test_utilization_series(metrics):
    u = metrics.utilization
    assert u.times_s == (0, 5, 10, 20, 25)
    assert u.values == (0.5, 0.75, 1.0, 0.375, 0.125)
    assert u.end_s == 30
    assert metrics.mean_utilization == pytest.approx(75 / 120)


def test_queue_length_series(metrics):
    q = metrics.queue_length
    # B waits 0-10, D waits 10-20: one job waiting until 20, then none.
    assert (q.times_s, q.values) == ((0, 5, 10, 20), (1, 1, 1, 0))
    assert metrics.mean_queue_length == pytest.approx(20 / 30)


def test_tenant_shares(metrics):
    a, b = metrics.tenants["a"], metrics.tenants["b"]
    assert a.gpu_hours == pytest.approx(40 / 3600) and b.gpu_hours == pytest.approx(35 / 3600)
    assert a.usage_share == pytest.approx(40 / 75) and a.entitled_share == 0.5
    assert a.usage_vs_entitlement == pytest.approx(80 / 75)
    assert a.entitlement_used == pytest.approx(40 / 60) and b.entitlement_used == pytest.approx(35 / 60)
    assert (a.preemptions, b.preemptions, metrics.preemptions) == (0, 1, 1)


def test_tenant_without_entitlement_and_entitlement_without_jobs():
    m = compute_metrics([ran(A, 0)], 4, entitlements={"idle": 2})
    assert m.tenants["a"].usage_vs_entitlement is None and m.tenants["a"].entitlement_used is None
    assert m.tenants["idle"].gpu_hours == 0 and m.tenants["idle"].entitlement_used == 0


def test_preempted_job_holds_gpus_only_while_running():
    segmented = JobResult(A, 0, 25, preemptions=1, segments=((0, 5), (20, 25)))
    m = compute_metrics([segmented], 4)
    assert m.utilization.values == (0.5, 0.0, 0.5)
    assert m.queue_length.values == (0, 1, 0)  # waiting again between its runs
    assert m.tenants["a"].gpu_hours == pytest.approx(20 / 3600)
    assert m.overall.jct_s.mean == 25


def test_explicit_gpus_held_override_the_request():
    m = compute_metrics([JobResult(D, 10, 20, gpus=1.0)], 1)
    assert m.mean_utilization == 1.0


def test_serializes_to_json_with_resampled_series(metrics):
    data = json.loads(json.dumps(metrics.to_dict(series_points=2)))
    assert data["utilization"]["times_s"] == [0, 15]
    assert data["utilization"]["values"] == pytest.approx([45 / 60, 30 / 60])  # time-weighted bin means
    assert data["tenants"]["b"]["preemptions"] == 1
    assert len(json.loads(json.dumps(metrics.to_dict(series_points=None)))["utilization"]["values"]) == 5


def test_inconsistent_results_are_rejected():
    with pytest.raises(ValueError, match="out of order"):
        compute_metrics([JobResult(C, 1, 30)], 4)
    with pytest.raises(ValueError, match="gpu_capacity"):
        compute_metrics(RESULTS, 0)
