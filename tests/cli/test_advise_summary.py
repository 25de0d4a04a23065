"""`corral advise`'s account of the history (cli/advise_summary.py), from hand-made accounting records."""
from __future__ import annotations

from corral.cli.advise_summary import summarize
from tests.sim.accounting_records import HOUR, T0, overloaded_queue, record, two_queue_tenancy

SAMPLED = {"nodes": 1, "samples": 10, "interval_s": 30.0, "rss_kib": 0, "max_rss_kib": 0, "max_rss_node": "node1",
           "ave_rss_kib": 0, "cpu_s": 1.0, "gpus": 4, "gpu_util_pct": 0.0, "max_gpu_util_pct": 90.0,
           "ave_gpu_util_pct": 50.0, "max_gpu_mem_mib": 0, "ave_gpu_mem_mib": 0, "gpu_idle_s": 0.0}


def test_mix_waits_and_utilisation_of_the_window():
    records = overloaded_queue(4) + [
        record(10, 0, 0, 2 * HOUR, user="bob", account="b", queue="qb", gpus=1),
        record(11, 0, None, None, user="bob", account="b", queue="qb", gpus=1, state="CANCELLED"),
    ]
    summary = summarize(records, T0, T0 + 8 * HOUR, 8, two_queue_tenancy()["queues"])
    assert summary["period"] == {"since": T0, "until": T0 + 8 * HOUR, "jobs": 6, "finished": 5, "gpus": 8}
    assert summary["mix"]["by_size"] == [
        {"name": "1", "jobs": 1, "gpu_hours": 2.0, "median_runtime_s": 7200.0},
        {"name": "2-4", "jobs": 4, "gpu_hours": 16.0, "median_runtime_s": 3600.0}]
    assert [(r["name"], r["jobs"], r["gpu_hours"]) for r in summary["mix"]["by_account"]] == [("a", 4, 16.0),
                                                                                           ("b", 1, 2.0)]
    waits = summary["waits"]
    # qa's jobs waited 0, 1, 2 and 3 hours; qb's one started at once (the cancelled one never started).
    assert waits["by_queue"] == [{"name": "qa", "jobs": 4, "mean_s": 5400.0, "p50_s": 5400.0, "p90_s": 9720.0},
                                 {"name": "qb", "jobs": 1, "mean_s": 0.0, "p50_s": 0.0, "p90_s": 0.0}]
    assert waits["overall"]["jobs"] == 5 and waits["overall"]["mean_s"] == 4320.0
    # 18 GPU-hours of 64 (8 GPUs for 8 hours).
    assert summary["utilisation"] == {"gpu_hours": 18.0, "capacity_gpu_hours": 64.0, "ratio": 0.2812}


def test_a_job_running_across_the_window_counts_only_its_part_in_it():
    records = [record(1, -HOUR, -HOUR, 2 * HOUR, gpus=2), record(2, HOUR, HOUR, None, gpus=2)]
    summary = summarize(records, T0, T0 + 2 * HOUR, 4)
    # job 1: 1 hour of its 2 inside; job 2 (still running): from 1 h to the end of the window.
    assert summary["utilisation"]["gpu_hours"] == 4.0
    assert summary["period"]["finished"] == 1


def test_quota_queues_borrowed_and_unused_gpu_hours():
    records = [record(1, 0, 0, HOUR, gpus=8),  # qa (nominal 4) holds 8 for an hour: 4 borrowed
               record(2, HOUR, HOUR, HOUR, gpus=2)]  # then 2 for an hour: 2 of its quota unused
    qa, qb = summarize(records, T0, T0 + 2 * HOUR, 8, two_queue_tenancy()["queues"])["queues"]
    assert qa == {"name": "qa", "cohort": None, "nominal_gpus": 4.0, "borrowing_limit_gpus": None,
                  "lending_limit_gpus": None, "gpu_hours": 10.0, "peak_gpus": 8, "borrowed_gpu_hours": 4.0,
                  "unused_quota_gpu_hours": 2.0}
    assert (qb["gpu_hours"], qb["unused_quota_gpu_hours"]) == (0.0, 8.0)


def test_idle_gpus_flagged_jobs_top_offenders_and_goodput():
    records = [
        record(1, 0, 0, HOUR, gpus=4, usage={**SAMPLED, "gpu_idle_s": 1800.0, "ave_gpu_util_pct": 10.0},
               gpu_idle_flagged=True),
        record(2, 0, 0, HOUR, gpus=4, user="bob", account="b", usage={**SAMPLED, "gpu_idle_s": 600.0}),
        record(3, 0, 0, HOUR, gpus=4, usage={**SAMPLED, "ave_gpu_util_pct": 90.0}),
        record(4, 0, 0, HOUR, gpus=4),  # not sampled
    ]
    summary = summarize(records, T0, T0 + HOUR, 16)
    idle = summary["idle"]
    # 4 GPUs x 30 min + 4 GPUs x 10 min = 160 GPU-minutes of the 16 GPU-hours held.
    assert (idle["idle_gpu_hours"], idle["share_of_allocated"]) == (2.67, 0.1667)
    assert (idle["flagged_jobs"], idle["flagged_gpu_hours"]) == (1, 2.0)
    assert [(r["id"], r["user"], r["idle_s"], r["flagged"]) for r in idle["top"]] == [
        (1, "alice", 1800, True), (2, "bob", 600, False)]
    # (10 % + 50 % + 90 %) of 4 GPU-hours each, over the 12 GPU-hours sampled.
    assert summary["goodput"] == {"ratio": 0.5, "sampled_jobs": 3, "unsampled_jobs": 1}
