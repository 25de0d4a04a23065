"""forecast-philly (sim/forecast_experiment.py): how errors are measured, and a short replay end to end."""
from __future__ import annotations

import pytest

from corral.sim import forecast_experiment as fe
from corral.sim.suite import DURATION_SCALE


def outcome(samples, actual) -> fe.ForecastOutcome:
    return fe.ForecastOutcome(samples, actual, [0.1], [len(samples)], 3, 1.0, "hand-made", (0.0, 0.0, 3600.0))


def test_the_error_is_relative_to_the_wait_still_ahead_at_the_forecast():
    samples = [fe.Sample(at_s=1000, job_id=1, ours_s=1900, baseline_s=5000, oracle_s=2000),
               # started 10 s after the forecast: the wait counts as a minute
               fe.Sample(at_s=1000, job_id=2, ours_s=1030, baseline_s=1010, oracle_s=1010),
               fe.Sample(at_s=1000, job_id=3, ours_s=1500, baseline_s=1500, oracle_s=1500)]  # never started
    err = fe.errors(outcome(samples, {1: 2000.0, 2: 1010.0}))
    assert err["ours"].tolist() == pytest.approx([0.1, 20 / 60])
    assert err["baseline"].tolist() == pytest.approx([3.0, 0.0])
    assert err["oracle"].tolist() == pytest.approx([0.0, 0.0])


def test_a_short_philly_replay_reports_both_forecasts(philly_workload, tmp_path):
    jobs = fe.workload(DURATION_SCALE, window_days=3)
    row = fe.summary(fe.run(jobs, warmup_s=60 * 3600, span_s=4 * 3600, every_s=2 * 3600))
    assert row["name"] == "forecast-philly" and row["instants"] == 3 and row["n"] > 0
    for key in ("p50_err_pct", "p90_err_pct", "baseline_p50_err_pct", "baseline_p90_err_pct"):
        assert row[key] is not None and row[key] >= 0
    # Runtimes learnt from the replay beat assuming every job runs its whole limit.
    assert row["p50_err_pct"] < row["baseline_p50_err_pct"]
    assert row["runtime_p50_err_pct"] is not None and row["runtime_p50_err_pct"] > 0
    (tmp_path / "r.html").write_text(fe.render(row))
    assert "forecast-philly" in (tmp_path / "r.html").read_text()


def test_the_runtime_models_own_error_is_relative_to_the_true_runtime():
    samples = [fe.Sample(0, 1, 0, 0, 0, predicted_runtime_s=150.0),
               fe.Sample(0, 2, 0, 0, 0, predicted_runtime_s=100.0),
               fe.Sample(0, 3, 0, 0, 0, predicted_runtime_s=10.0)]  # never started: left out
    found = fe.ForecastOutcome(samples, {1: 5.0, 2: 5.0}, [0.1], [3], 3, 1.0, "hand-made", (0.0, 0.0, 3600.0),
                               durations={1: 100.0, 2: 400.0, 3: 10.0})
    assert fe.runtime_errors(found).tolist() == pytest.approx([0.5, 0.75])


def test_expected_arrivals_are_the_last_windows_submissions_again_running_what_the_model_predicts():
    from corral.api.schemas import JobSubmit
    from corral.sim.driver import SimSubmission
    from corral.sim.forecast import RuntimeModel

    def submitted(at: float, user: str) -> SimSubmission:
        return SimSubmission(at, JobSubmit(name="j", user=user, argv=["true"], workdir="/", time_limit_s=1000), 7.0)

    model = RuntimeModel(min_user_samples=1)
    model.observe("alice", 250.0, 1000.0)
    subs = [submitted(10.0, "alice"), submitted(50.0, "alice"), submitted(90.0, "bob"), submitted(100.0, "alice")]
    again = fe._replayed(subs, model, at=100.0, window_s=60.0)
    # Only what was submitted in [40, 100), each 60 s later; alice's runs a quarter of its limit, bob (no
    # history of his own) everyone's ratio, which is alice's.
    assert [(s.at_s, s.request.user, s.duration_s) for s in again] == [(110.0, "alice", 250.0), (150.0, "bob", 250.0)]
