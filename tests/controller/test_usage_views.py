"""A job's usage over its nodes (controller/usage_views.py): stored final figures, else the live samples."""
from __future__ import annotations

from corral.controller.usage_views import LiveUsage, combine, gpu_idle_flagged
from corral.protocol import NodeFinished, Usage, UsageReport


def usage(**fields) -> dict:
    return Usage(samples=2, interval_s=30, **fields).model_dump()


def test_memory_is_per_node_cpu_and_gpu_memory_add_up_and_utilisation_is_by_device():
    both = combine({"n1": usage(max_rss_kib=10, ave_rss_kib=8, cpu_s=1.5, gpus=1, max_gpu_util_pct=90,
                                ave_gpu_util_pct=80, max_gpu_mem_mib=100, gpu_idle_s=0),
                    "n2": usage(max_rss_kib=30, ave_rss_kib=20, cpu_s=2.0, gpus=3, max_gpu_util_pct=10,
                                ave_gpu_util_pct=40, max_gpu_mem_mib=300, gpu_idle_s=60)})
    assert (both["nodes"], both["samples"], both["max_rss_kib"], both["max_rss_node"], both["ave_rss_kib"]) == (
        2, 4, 30, "n2", 14)
    assert (both["cpu_s"], both["gpus"], both["max_gpu_util_pct"], both["ave_gpu_util_pct"]) == (3.5, 4, 90, 50.0)
    assert (both["max_gpu_mem_mib"], both["gpu_idle_s"]) == (400, 0)  # idle only while every node is
    assert combine({}) is None


def test_live_samples_are_kept_per_node_until_the_node_reports_the_end():
    live = LiveUsage()
    active = {7: object()}
    live.take("n1", [UsageReport(job_id=7, usage=Usage(samples=1, cpu_s=1)),
                     UsageReport(job_id=7, step_id=0, usage=Usage(samples=1, cpu_s=2)),
                     UsageReport(job_id=8, usage=Usage(samples=1))], active)
    live.take("n2", [UsageReport(job_id=7, usage=Usage(samples=1, cpu_s=3))], active)
    assert {step: sorted(nodes) for step, nodes in live.of(7).items()} == {None: ["n1", "n2"], 0: ["n1"]}
    assert live.of(8) == {}  # not an active job: not kept
    live.take("n1", [NodeFinished(job_id=7, tasks=[])], active)
    assert sorted(live.of(7)[None]) == ["n2"]


def test_a_job_is_flagged_once_its_gpus_stayed_idle_for_the_flag_setting_on_every_node():
    idle, busy = usage(gpus=2, gpu_idle_s=1800), usage(gpus=2, gpu_idle_s=10)
    assert gpu_idle_flagged(combine({"n1": idle, "n2": idle}), 1800)
    assert not gpu_idle_flagged(combine({"n1": idle, "n2": busy}), 1800)  # one node's GPUs work
    assert not gpu_idle_flagged(combine({"n1": idle}), 1801)
    assert not gpu_idle_flagged(combine({"n1": idle}), 0)  # 0: never flagged
    assert not gpu_idle_flagged(combine({"n1": usage(gpus=0, gpu_idle_s=5000)}), 60)  # no GPU sampled
    assert not gpu_idle_flagged(None, 60)
