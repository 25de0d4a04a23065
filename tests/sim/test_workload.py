import json

import pytest

from corral.sim.workload import Cluster, TraceJob, Workload

from .builders import job


def test_jobs_are_replayed_in_submit_order_with_id_as_tie_break():
    w = Workload((job(3, submit_s=5), job(2, submit_s=1), job(1, submit_s=5)), "w", "test")
    assert [j.id for j in w.jobs] == [2, 1, 3]
    assert w.span_s == 4


def test_duplicate_ids_are_rejected():
    with pytest.raises(ValueError, match="not unique"):
        Workload((job(1), job(1, submit_s=2)), "w", "test")


@pytest.mark.parametrize("kwargs, message", [
    ({"nodes": 0}, "num_nodes"),
    ({"gpu_milli": 1001}, "gpu_milli"),
    ({"gpus": 2, "gpu_milli": 500}, "fractional"),
    ({"duration_s": -1}, "duration_s"),
    ({"duration_s": float("nan")}, "duration_s"),
    ({"time_limit_s": 0}, "time_limit_s"),
])
def test_impossible_shapes_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        job(**kwargs)


def test_gpu_totals_and_gpu_seconds():
    gang = job(nodes=2, gpus=4, duration_s=10)
    share = job(gpus=1, gpu_milli=250, duration_s=100)
    assert (gang.total_gpus, gang.total_gpu_milli, gang.gpu_seconds) == (8, 8000, 80.0)
    assert (share.total_gpus, share.total_gpu_milli, share.gpu_seconds) == (1, 250, 25.0)


def test_gpu_model_alternatives():
    assert job().allowed_gpu_models is None
    constrained = TraceJob.from_dict({**job().to_dict(), "gpu_model": "T4|V100M16"})
    assert constrained.allowed_gpu_models == frozenset({"T4", "V100M16"})


def test_workload_round_trips_through_json():
    w = Workload((job(1, time_limit_s=60), job(2, submit_s=3, gpu_milli=460)), "w", "src", 1.5e9, ("a note",))
    again = Workload.from_dict(json.loads(json.dumps(w.to_dict())))
    assert again == w


def test_filter_and_head_record_what_was_done():
    w = Workload(tuple(job(i, submit_s=i) for i in range(5)), "w", "src")
    assert [j.id for j in w.head(2).jobs] == [0, 1]
    assert w.filter(lambda j: j.id % 2 == 0, "even ids").notes == ("even ids",)


def test_uniform_cluster_entitlements():
    c = Cluster.uniform("c", {"a": 2, "b": 1}, gpus_per_node=8, cpus_per_node=32, mem_per_node_mib=1024)
    assert c.total_gpus == 24
    assert c.queue_gpus() == {"a": 16, "b": 8}
    assert c.queue_nodes() == {"a": 2, "b": 1}
    assert [n.name for n in c.nodes] == ["a-0000", "a-0001", "b-0000"]
