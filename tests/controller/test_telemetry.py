"""What the dashboard plots over time (controller/telemetry.py): bounded, one sample per bucket."""
from __future__ import annotations

from corral.controller.telemetry import JobSeries, UtilisationHistory


def test_utilisation_keeps_the_latest_state_of_each_bucket_and_the_newest_buckets() -> None:
    history = UtilisationHistory(step_s=10.0, keep=3)
    history.record(100.0, 1, 8)
    history.record(105.0, 4, 8)  # the same bucket: its latest state, from the bucket's first time
    history.record(111.0, 5, 8)
    assert [(s["time"], s["gpus_alloc"]) for s in history.samples()] == [(100.0, 4), (111.0, 5)]
    for t in (120.0, 130.0, 140.0, 141.0):
        history.record(t, 2, int(t) % 7)
    assert [s["time"] for s in history.samples()] == [120.0, 130.0, 140.0]
    assert history.samples()[-1] == {"time": 140.0, "gpus_alloc": 2, "gpus_total": 1}


def usage(util: float, rss_kib: int = 2048) -> dict:
    return {"gpu_util_pct": util, "rss_kib": rss_kib, "cpu_s": 1.5, "gpus": 2, "nodes": 1, "samples": 3}


def test_job_series_are_bounded_per_job_and_in_jobs_and_skip_unsampled_jobs() -> None:
    series = JobSeries(jobs=2, points=2)
    series.record(1.0, [(7, usage(10)), (8, None)])
    series.record(2.0, [(7, usage(20))])
    series.record(3.0, [(7, usage(30))])
    assert [p["gpu_util_pct"] for p in series.of(7)] == [20, 30]
    assert series.of(7)[-1] == {"time": 3.0, "gpu_util_pct": 30, "rss_kib": 2048, "cpu_s": 1.5, "gpus": 2, "nodes": 1}
    assert series.of(8) == []
    series.record(4.0, [(9, usage(1))])
    series.record(5.0, [(7, usage(40))])  # 7 reports again: 9 is now the least recently reported
    series.record(6.0, [(10, usage(1))])  # a third job: 9 goes
    assert series.of(9) == [] and [p["time"] for p in series.of(7)] == [3.0, 5.0] and len(series.of(10)) == 1


def test_two_reports_at_one_time_make_one_point() -> None:
    series = JobSeries()
    series.record(1.0, [(7, usage(10))])
    series.record(1.0, [(7, usage(50))])  # another node's report in the same batch time
    assert [p["gpu_util_pct"] for p in series.of(7)] == [50]
