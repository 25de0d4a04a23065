"""`corral show`'s seff figures (cli/efficiency.py) from sampled usage."""
from __future__ import annotations

from corral.cli import render
from corral.cli.efficiency import goodput_line as render_goodput

from .standin import T0, canned_jobs, make_job

SAMPLED = {"nodes": 2, "samples": 10, "interval_s": 30.0, "rss_kib": 0, "max_rss_kib": 4 * 1024 * 1024,
           "max_rss_node": "node2", "ave_rss_kib": 0, "cpu_s": 2424.0, "gpus": 8, "gpu_util_pct": 1.0,
           "max_gpu_util_pct": 97.0, "ave_gpu_util_pct": 41.5, "max_gpu_mem_mib": 60000, "ave_gpu_mem_mib": 0,
           "gpu_idle_s": 0.0}


def fields_of(job: dict) -> dict[str, str]:
    return dict(render.job_fields(job))


def test_cpu_memory_and_gpu_efficiency_of_a_sampled_job():
    job = {**canned_jobs()[1], "usage": SAMPLED}  # 2 nodes x 8 CPUs for 303 s, 16 GiB per node
    fields = fields_of(job)
    assert fields["CPUUtilized"] == "00:40:24"
    assert fields["CPUEfficiency"] == "50.00% of 01:20:48 core-walltime"
    assert fields["MemUtilized"] == "4096.00 MiB (largest node)"
    assert fields["MemEfficiency"] == "25.00% of 16384 MiB per node"
    assert fields["GpuUtilization"] == "41.5% average, 97.0% peak"
    assert "GpuIdle" not in fields


def test_a_job_the_controller_flagged_for_idle_gpus_says_so():
    job = {**canned_jobs()[1], "usage": {**SAMPLED, "gpu_idle_s": 2400.0}, "gpu_idle_flagged": True}
    assert fields_of(job)["GpuIdle"] == "IDLE: its GPUs have stayed under 5% for 00:40:00"
    # Idle as long, but not for the controller's gpu_idle_flag_s (say 3600): not flagged.
    assert "GpuIdle" not in fields_of({**job, "gpu_idle_flagged": False})


def test_unsampled_jobs_say_so():
    assert fields_of(canned_jobs()[1])["Efficiency"] == "(not sampled yet)"
    assert fields_of(make_job(9))["Efficiency"] == "(not started)"
    assert T0


def test_goodput_is_gpu_seconds_used_over_allocated_of_the_sampled_jobs():
    busy = {**canned_jobs()[1], "gpu_seconds": 3000.0, "usage": {**SAMPLED, "ave_gpu_util_pct": 80.0}}
    idle = {**canned_jobs()[3], "gpu_seconds": 1000.0, "usage": {**SAMPLED, "ave_gpu_util_pct": 10.0}}
    unsampled = {**canned_jobs()[3], "gpu_seconds": 500.0}
    line = render_goodput([busy, idle, unsampled, canned_jobs()[2]])
    assert line == "Goodput: 62.50% of 4000 GPU-seconds used (2 GPU job(s) sampled, 1 not sampled)"
    assert render_goodput([canned_jobs()[2]]) is None  # no job held a GPU
