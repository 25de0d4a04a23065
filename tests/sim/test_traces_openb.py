from collections import Counter

import pytest

from corral.sim.traces import TraceFormatError, openb


def test_gpu_nodes_match_the_readme(openb_nodes):
    assert len(openb_nodes.nodes) == 1_213
    assert openb_nodes.total_gpus == 6_212
    assert Counter(n.gpu_model for n in openb_nodes.nodes) == {
        "G2": 549, "T4": 404, "P100": 134, "V100M16": 55, "G3": 39, "V100M32": 30, "A10": 2}
    first = openb_nodes.nodes[0]
    assert (first.name, first.cpu_milli, first.cpus, first.mem_mib, first.gpus) == (
        "openb-node-0000", 64_000, 64, 262_144, 2)


def test_all_nodes_add_cpu_only_nodes():
    cluster = openb.read_nodes(openb.ALL_NODES_PATH)
    assert len(cluster.nodes) == 1_523
    assert cluster.total_gpus == 6_212


def test_default_pods_match_the_readme(openb_pods):
    assert len(openb_pods) == 8_152
    assert Counter(j.gpus_per_node for j in openb_pods.jobs) == {0: 1_088, 1: 6_989, 2: 16, 4: 15, 8: 44}
    assert sum(1 for j in openb_pods.jobs if 0 < j.gpu_milli < 1000) == 3_078
    assert all(j.num_nodes == 1 for j in openb_pods.jobs)


def test_a_pod_becomes_a_one_node_job(openb_pods):
    pod = next(j for j in openb_pods.jobs if j.name == "openb-pod-0001")
    # openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
    assert (pod.gpus_per_node, pod.gpu_milli, pod.cpus_per_node, pod.cpu_milli_per_node) == (1, 460, 6, 6000)
    assert (pod.mem_per_node_mib, pod.queue, pod.submit_s, pod.duration_s) == (12288, "LS", 427061, 12475899)


def test_model_constraints_in_gpuspec10():
    pods = openb.read_pods(openb.pod_list_path("gpuspec10"))
    constrained = [j for j in pods.jobs if j.gpu_model]
    assert len(constrained) == 732
    assert any(j.allowed_gpu_models == {"P100", "V100M16"} for j in constrained)


def test_lists_without_times_still_read():
    pods = openb.read_pods(openb.pod_list_path("multigpu20"))
    assert len(pods) == 8_324
    assert {j.submit_s for j in pods.jobs} == {0.0}


def test_unknown_variant():
    with pytest.raises(ValueError, match="unknown openb pod list"):
        openb.pod_list_path("nope")


HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
          "scheduled_time\n")


@pytest.mark.parametrize("row, message", [
    ("p1,1000,10,2,500,,LS,Running,0,10,0", r"pods\.csv:2: a 2-GPU pod with a fractional share"),
    ("p1,1000,10,0,500,,LS,Running,0,10,0", r":2: gpu_milli 500 on a pod with no GPU"),
    ("p1,1000,10,1,500,,LS,Running,10,5,10", r":2: times out of order"),
    ("p1,1k,10,1,500,,LS,Running,0,10,0", r":2: column 'cpu_milli': '1k' is not an integer"),
])
def test_malformed_pods(tmp_path, row, message):
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + row + "\n")
    with pytest.raises(TraceFormatError, match=message):
        openb.read_pods(path)


def test_truncated_gzip_names_the_file(tmp_path):
    import gzip

    data = gzip.compress((HEADER + "p1,1000,10,1,500,,LS,Running,0,10,0\n" * 2000).encode())
    path = tmp_path / "pods.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match=r"pods\.csv\.gz: cannot read"):
        openb.read_pods(path)
