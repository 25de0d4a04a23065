"""forecast-bluewaters (sim/forecast_bluewaters.py): the two windows, the start window's coverage, the report."""
from __future__ import annotations

from corral.sim import forecast_bluewaters as fb
from corral.sim import forecast_experiment as fe
from corral.sim.forecast import StartWindow

EARLY, LATE = fb.TUNE_UNTIL_S - 3600, fb.TUNE_UNTIL_S


def outcome(samples, actual) -> fe.ForecastOutcome:
    return fe.ForecastOutcome(samples, actual, [0.1, 0.2], [2, 1], 3, 1.0, "hand-made",
                              (fb.FIRST_S, fb.LAST_S, fb.SAMPLE_EVERY_S), {1: 100.0, 2: 100.0, 3: 100.0})


def sample(at, job_id, ours, baseline=0.0, oracle=0.0):
    return fe.Sample(at, job_id, ours, baseline, oracle, predicted_runtime_s=100.0)


def test_samples_before_the_split_tune_and_the_others_report():
    made = outcome([sample(EARLY, 1, EARLY + 100), sample(LATE, 2, LATE + 100)], {1: EARLY + 100, 2: LATE + 100})
    tuning, report = fb.split(made)
    assert [s.job_id for s in tuning.samples] == [1] and [s.job_id for s in report.samples] == [2]


def test_coverage_counts_the_started_jobs_whose_start_fell_inside_the_window():
    window = StartWindow(low=0.5, high=2.0, pad_s=0.0)
    made = outcome([sample(LATE, 1, LATE + 1000), sample(LATE, 2, LATE + 1000), sample(LATE, 3, LATE + 1000)],
                   {1: LATE + 1900, 2: LATE + 2100})  # job 3 never started: not counted
    assert fb.coverage(made, window) == 50.0


def test_the_row_reports_the_report_window_and_the_window_calibrated_on_the_tuning_one(tmp_path):
    samples = [sample(EARLY, 1, EARLY + 1000, baseline=EARLY + 5000, oracle=EARLY + 1500),
               sample(LATE, 2, LATE + 1000, baseline=LATE + 9000, oracle=LATE + 1500)]
    row = fb.summary(outcome(samples, {1: EARLY + 1500, 2: LATE + 1500}))
    assert row["n"] == 1 and row["tuning"]["n"] == 1
    assert (row["p50_err_pct"], row["baseline_p50_err_pct"], row["oracle_p50_err_pct"]) == (33.3, 500.0, 0.0)
    # Calibrated on job 1 alone (actual wait 2,100 / forecast 1,600 with the pad): it holds job 2 too.
    assert row["window_calibrated_here_coverage_pct"] == 100.0
    assert row["window_coverage_pct"] is not None
    assert "forecast-bluewaters" in fb.render(row)
