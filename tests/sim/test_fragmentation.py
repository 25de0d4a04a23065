import pytest

from corral.sim.fragmentation import (
    ClusterSnapshot,
    NodeGpus,
    fragmentation,
    fragmentation_series,
    node_fragmentation_milli,
    task_mix,
)
from corral.sim.metrics import compute_metrics

from .builders import job, ran

NODE = (1000, 1000, 500, 0)


@pytest.mark.parametrize("shape, frag", [
    ((1, 1000), 500),   # fits on a whole GPU: the half-used GPU is the fragment
    ((2, 1000), 500),
    ((4, 1000), 2500),  # does not fit: every free share on the node is lost to it
    ((1, 600), 500),    # a 0.6 share fits; the 0.5 leftover cannot hold it
    ((1, 500), 0),
])
def test_node_fragmentation(shape, frag):
    assert node_fragmentation_milli(NODE, shape) == frag


def test_cluster_fragmentation_is_the_mix_expectation():
    snapshot = ClusterSnapshot(7.0, (NodeGpus("n1", NODE), NodeGpus("n2", (0, 0))))
    point = fragmentation(snapshot, {(1, 1000): 0.5, (4, 1000): 0.25, (1, 600): 0.25})
    assert (point.time_s, point.free_gpu_milli, point.frag_gpu_milli) == (7.0, 2500, 1000)
    assert point.frag_pct_of_free == 40


def test_task_mix_by_frequency_without_cpu_jobs():
    jobs = [job(1), job(2), job(3, gpus=2), job(4, gpus=0, gpu_milli=0)]
    assert task_mix(jobs) == {(1, 1000): pytest.approx(2 / 3), (2, 1000): pytest.approx(1 / 3)}


def test_mix_must_be_a_distribution():
    with pytest.raises(ValueError, match="add up to"):
        fragmentation_series([], {(1, 1000): 0.5})


def test_metrics_include_fragmentation_when_given_snapshots():
    results = [ran(job(1, gpus=4), 0)]
    snapshots = [ClusterSnapshot(0, (NodeGpus("n", (0, 0, 0, 0, 1000, 1000, 1000, 500)),))]
    m = compute_metrics(results, 8, snapshots=snapshots)
    # Mix is all 4-GPU tasks; 3.5 free GPUs cannot hold one: all fragmented.
    assert m.fragmentation == [{"time_s": 0, "free_gpu_milli": 3500, "frag_gpu_milli": 3500.0,
                                "frag_pct_of_free": 100.0}]
