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


def test_the_online_window_at_an_instant_learns_only_from_earlier_forecasts_started_or_still_waiting():
    prior = StartWindow(low=0.5, high=2.0, pad_s=0.0)
    first, second = LATE, LATE + fb.SAMPLE_EVERY_S
    made = outcome([sample(first, 1, first + 1000), sample(first, 2, first + 1000), sample(second, 3, second + 100)],
                   {1: first + 3000, 2: second + 5000, 3: second + 300})  # job 2 starts after the second instant
    shown = fb.online_windows(made, prior, keep=10, min_outcomes=1, covered=0.8, shift_power=0.0)
    windows = {s.job_id: w for s, w in shown}
    assert windows[1] == windows[2] == prior  # nothing was known before the first instant
    # Job 1 waited 3x its forecast; job 2 still waits at the second instant, 10.8x already (10,800 / 1,000): the
    # window's late end is not known (the estimate stops at 3) and is the largest started ratio, 3.
    assert windows[3] == StartWindow(3.0, 3.0, 0.0)
    # Job 3 (300 s after a forecast of 100 s) falls inside 3 x its wait; jobs 1 and 2 fall past the prior's 2 x.
    assert fb.online_coverage(made, shown, tuning=False) == 33.3
    assert fb.online_coverage(made, [(s, StartWindow(0.0, 3.0, 0.0)) for s in made.samples], tuning=False) == 66.7
    assert fb.online_coverage(made, shown, tuning=True) is None
    assert fb.median_width_h(shown, tuning=False) == round(1500 / 3600, 1)  # 1,500 s, 1,500 s and 0 s


def test_the_shown_forecasts_are_shifted_by_the_median_of_what_was_known_at_their_instant():
    prior = StartWindow(low=0.5, high=2.0, pad_s=0.0)
    first, second = LATE, LATE + fb.SAMPLE_EVERY_S
    made = outcome([sample(first, 1, first + 1000), sample(second, 3, second + 100)],
                   {1: first + 4000, 3: second + 300})
    shown = fb.online_windows(made, prior, keep=10, min_outcomes=1, shift_power=0.5)
    assert [s.ours_s for s, _ in shown] == [first + 1000, second + 200]  # unshifted, then 4 ** 0.5 x the wait
    assert shown[1][1] == StartWindow(2.0, 2.0, 0.0)  # 4x the first wait, 2x the shifted one
    # Job 1 is off by 3,000 / 4,000 either way; job 3 by 200 / 300 unshifted, 100 / 300 shifted.
    assert [round(e, 3) for e in fe.errors(made)["ours"]] == [0.75, 0.667]
    assert [round(e, 3) for e in fe.errors(fb.shown(made, shown))["ours"]] == [0.75, 0.333]
    row = fb.summary(made)  # the row's settings are the shipped ones: too few outcomes here for a shift
    assert row["unshifted_p50_err_pct"] == row["p50_err_pct"] == 70.8
