"""End to end: agents that find real GPU names through NVML (a pynvml stand-in, tests/e2e/fake_nvml),
and jobs that ask for them by Slurm GRES type, in any case."""
from __future__ import annotations

import pytest

from tests.slurm.commands import Commands

pytestmark = pytest.mark.slow

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def test_gres_types_run_on_the_nodes_whose_nvml_names_they_designate(cluster_factory, tmp_path):
    cluster = cluster_factory(nvml_names={"node1": [A100] * 2, "node2": [H100] * 2})
    assert {n["name"]: [g["model"] for g in n["gpus"]] for n in cluster.nodes()} == {
        "node1": [A100] * 2, "node2": [H100] * 2}, "the record keeps NVML's name"
    cmd = Commands(cluster, tmp_path)
    for gres, node in [("gpu:h100:1", "node2"), ("gpu:H100:1", "node2"), ("gpu:nvidia_h100_80gb_hbm3:2", "node2"),
                       ("gpu:A100-80GB:1", "node1")]:
        job_id = cmd.submit(f"--gres={gres}", "-o", "/dev/null", "--wrap", "true")
        job = cluster.wait_state(job_id, "COMPLETED", "FAILED")
        assert (job["state"], job["nodelist"]) == ("COMPLETED", node), gres
    refused = cmd("sbatch", "--gres=gpu:v100:1", "--wrap", "true")
    assert refused.code == 1
    assert f"(models: a100 ({A100}), h100 ({H100}))" in refused.stderr, refused
    sinfo = cmd("sinfo", "-N", "-h", "-o", "%N %G")
    assert sinfo.stdout == "node1 gpu:a100:2\nnode2 gpu:h100:2\n", sinfo
