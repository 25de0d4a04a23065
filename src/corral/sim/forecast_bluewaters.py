"""`forecast-bluewaters`: start-time forecasts on real user time limits (the Blue Waters sample).

The replay: every job of `read_bluewaters` on the real machine's size (22,656 XE + 4,224 XK nodes; see
sim/traces/bluewaters.py for how nodes become units). The sample is sparse for its first 77 days and dense
for its last ten (13,600 of its 15,000 jobs arrive in days 82-86.5), and then the real machine queues, so
forecasts are sampled every SAMPLE_EVERY_S from FIRST_S to the end. Same policy, same three forecasts and
the same error as `forecast-philly` (sim/forecast_experiment.py): ours (limits x each user's recent ratios
actual/limit), Slurm's (every job runs to its limit), and the oracle (true runtimes; only new arrivals
unknown), and the runtime model alone. Ours predicts with the quantile the live controller uses
(forecast.LIVE_QUANTILE, tuned on this replay's tuning window).

Two windows, by forecast instant: samples before TUNE_UNTIL_S tune, the others report. The start window
(sim/forecast.py `StartWindow`) is calibrated on the tuning samples (conformal: the quantiles of actual
wait / forecast wait there), and its coverage is measured on the report samples, as is every error figure.
The fixed factors (forecast.START_WINDOW) were set from this run's tuning window; beside them, the window
calibrated online (forecast.OnlineWindow, what the live controller shows) is replayed over the samples: at
each instant it knows only the earlier forecasts, and of each whether its job had started by then (and
when) or still waited (`online_windows`); it also shifts ours, and the row's `ours` is the shifted forecast
(what the live controller shows), with the unshifted one beside it. Its settings were chosen on the tuning
window.
"""
from __future__ import annotations

import html
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from corral.sim import forecast_experiment as philly
from corral.sim.experiment import Policy
from corral.sim.forecast import LIVE_QUANTILE, START_WINDOW, OnlineWindow, RuntimeModel, StartWindow
from corral.sim.forecast_experiment import ForecastOutcome, Sample, pct
from corral.sim.traces.bluewaters import bluewaters_cluster, fit_to, read_bluewaters

DAY_S = 86400.0
XE_UNITS, XK_UNITS = 22_656, 4_224  # the real machine: 22,636 XE and 4,228 XK nodes, in whole 32-unit nodes
FIRST_S = 77 * DAY_S
LAST_S = 86.5 * DAY_S
SAMPLE_EVERY_S = 3 * 3600.0
TUNE_UNTIL_S = 85.5 * DAY_S
POLICY = Policy("forecast-bluewaters", isolated=True, backfill=True, weight_age=10_000, weight_job_size=10_000,
                favor_small=True)


def run(progress: Callable[[str], None] | None = None) -> ForecastOutcome:
    cluster = bluewaters_cluster(XE_UNITS, XK_UNITS)
    return philly.run(fit_to(read_bluewaters(), cluster), warmup_s=FIRST_S, span_s=LAST_S - FIRST_S,
                      every_s=SAMPLE_EVERY_S, progress=progress, cluster=cluster, policy=POLICY,
                      model=RuntimeModel(quantile=LIVE_QUANTILE))


def split(outcome: ForecastOutcome) -> tuple[ForecastOutcome, ForecastOutcome]:
    """(tuning, report): the samples taken before TUNE_UNTIL_S, and the others."""
    def only(keep: Callable[[Sample], bool]) -> ForecastOutcome:
        return ForecastOutcome([s for s in outcome.samples if keep(s)], outcome.actual, outcome.forecast_wall_s,
                               outcome.pending_counts, outcome.replay_jobs, outcome.wall_s, outcome.source,
                               outcome.sampled, outcome.durations)
    return only(lambda s: s.at_s < TUNE_UNTIL_S), only(lambda s: s.at_s >= TUNE_UNTIL_S)


def _started(outcome: ForecastOutcome) -> list[tuple[float, float, float]]:
    """(instant, our forecast, actual start) of every sample whose job started."""
    return [(s.at_s, s.ours_s, outcome.actual[s.job_id]) for s in outcome.samples if s.job_id in outcome.actual]


def coverage(outcome: ForecastOutcome, window: StartWindow) -> float | None:
    found = [window.bounds(at, ours)[0] <= actual <= window.bounds(at, ours)[1]
             for at, ours, actual in _started(outcome)]
    return round(float(np.mean(found)) * 100, 1) if found else None


def online_windows(outcome: ForecastOutcome, prior: StartWindow = START_WINDOW,
                   **settings: Any) -> list[tuple[Sample, StartWindow]]:
    """Each sample as an OnlineWindow(prior, **settings) shows it at its instant, as the live controller
    does: its forecast shifted (`ours_s` replaced) and the window around it, both from the forecasts of
    earlier instants, each either started by then (its ratio) or still waiting (a lower bound of it), and
    from nothing else."""
    online = OnlineWindow(prior, **settings)
    by_instant: dict[float, list[Sample]] = {}
    for s in outcome.samples:
        by_instant.setdefault(s.at_s, []).append(s)
    found: list[tuple[Sample, StartWindow]] = []
    for at in sorted(by_instant):
        shift, window = online.calibrated(at)
        found.extend((replace(s, ours_s=online.shifted(at, s.ours_s, shift)), window) for s in by_instant[at])
        for s in by_instant[at]:
            online.forecast(s.job_id, at, s.ours_s)
            if s.job_id in outcome.actual:  # the window reads it only from that instant on (OnlineWindow.ratios)
                online.started(s.job_id, outcome.actual[s.job_id])
    return found


def shown(outcome: ForecastOutcome, windows: list[tuple[Sample, StartWindow]]) -> ForecastOutcome:
    """`outcome` with the forecasts the live controller would show (shifted online: `online_windows`)."""
    return replace(outcome, samples=[s for s, _ in windows])


def online_coverage(outcome: ForecastOutcome, windows: list[tuple[Sample, StartWindow]],
                    tuning: bool) -> float | None:
    """The share of the started jobs' samples of one window (the tuning one, or the report one) whose start
    fell inside the window they were shown."""
    found = [window.bounds(s.at_s, s.ours_s)[0] <= outcome.actual[s.job_id] <= window.bounds(s.at_s, s.ours_s)[1]
             for s, window in windows if (s.at_s < TUNE_UNTIL_S) == tuning and s.job_id in outcome.actual]
    return round(float(np.mean(found)) * 100, 1) if found else None


def median_width_h(windows: list[tuple[Sample, StartWindow]], tuning: bool) -> float | None:
    """The median width (latest - earliest start, hours) of the windows shown to one window's samples."""
    widths = [window.bounds(s.at_s, s.ours_s)[1] - window.bounds(s.at_s, s.ours_s)[0]
              for s, window in windows if (s.at_s < TUNE_UNTIL_S) == tuning]
    return round(float(np.median(widths)) / 3600, 1) if widths else None


def _errors(outcome: ForecastOutcome) -> dict[str, Any]:
    err, runtime_err = philly.errors(outcome), philly.runtime_errors(outcome)
    row: dict[str, Any] = {"n": len(err["ours"])}
    for name, key in (("ours", ""), ("baseline", "baseline_"), ("oracle", "oracle_")):
        row[f"{key}p50_err_pct"], row[f"{key}p90_err_pct"] = pct(err[name], 50), pct(err[name], 90)
    row["runtime_p50_err_pct"], row["runtime_p90_err_pct"] = pct(runtime_err, 50), pct(runtime_err, 90)
    return row


def summary(outcome: ForecastOutcome) -> dict[str, Any]:
    tuning, report = split(outcome)
    calibrated = StartWindow.calibrate(_started(tuning))
    windows = online_windows(outcome)
    shown_tuning, shown_report = split(shown(outcome, windows))
    unshifted = {name: _errors(part) for name, part in (("report", report), ("tuning", tuning))}
    row: dict[str, Any] = {
        "name": "forecast-bluewaters",
        "setup": (f"{outcome.source} ({outcome.replay_jobs} jobs) on {XE_UNITS:,} XE + {XK_UNITS:,} XK nodes "
                  f"(the real machine's size), {POLICY.describe()}. Forecast every {SAMPLE_EVERY_S / 3600:g} h "
                  f"from day {FIRST_S / DAY_S:g} to day {LAST_S / DAY_S:g}, every pending job; tuning window: "
                  f"instants before day {TUNE_UNTIL_S / DAY_S:g}, report window: the rest. error = |forecast - "
                  f"actual start| / max(actual start - forecast instant, {philly.MIN_WAIT_S:g} s). Forecasts "
                  f"assume no new arrivals; ours is shifted online by the median of its recent outcomes "
                  f"(OnlineWindow.calibrated), as the live controller shows it."),
        **_errors(shown_report),
        "tuning": _errors(shown_tuning),
        "unshifted_p50_err_pct": unshifted["report"]["p50_err_pct"],
        "unshifted_p90_err_pct": unshifted["report"]["p90_err_pct"],
        "unshifted_tuning_p50_err_pct": unshifted["tuning"]["p50_err_pct"],
        "unshifted_tuning_p90_err_pct": unshifted["tuning"]["p90_err_pct"],
        "quantile": LIVE_QUANTILE,
        "window_shipped": START_WINDOW.describe(),
        "window_coverage_pct": coverage(report, START_WINDOW),
        "window_calibrated_here": calibrated.describe() if calibrated else None,
        "window_calibrated_here_coverage_pct": coverage(report, calibrated) if calibrated else None,
        "window_online_coverage_pct": online_coverage(outcome, windows, tuning=False),
        "window_online_tuning_coverage_pct": online_coverage(outcome, windows, tuning=True),
        "window_online_width_h": median_width_h(windows, tuning=False),
        "window_online_tuning_width_h": median_width_h(windows, tuning=True),
        "target": "p50 <= 25 %, p90 <= 60 %, p50 at least 5x better than Slurm's; window covers 80 %",
        "instants": len(outcome.forecast_wall_s),
        "forecast_wall_s_max": round(max(outcome.forecast_wall_s), 3),
        "pending_max": max(outcome.pending_counts),
        "wall_s": round(outcome.wall_s, 1),
    }
    return row


def render(row: dict[str, Any]) -> str:
    """reports/forecast-bluewaters.html."""
    def line(name: str, data: dict[str, Any], key: str) -> str:
        return (f"<tr><td>{html.escape(name)}</td><td>{data.get(key + 'p50_err_pct')}</td>"
                f"<td>{data.get(key + 'p90_err_pct')}</td></tr>")
    table = "".join(line(name, row, key) for name, key in (
        ("ours: limit x the user's recent ratios actual/limit", ""), ("Slurm: every job runs to its limit",
                                                                      "baseline_"),
        ("oracle: true runtimes (only new arrivals unknown)", "oracle_"), ("the runtime model alone", "runtime_")))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>corral simulate: forecast-bluewaters</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}td,th{{border:1px solid #ccc;padding:3px 8px}}
table{{border-collapse:collapse}}</style></head><body>
<h1>Start-time forecasts on Blue Waters (real user time limits)</h1>
<p>{html.escape(row["setup"])}</p>
<table><tr><th>report window</th><th>p50 error (%)</th><th>p90 (%)</th></tr>{table}</table>
<p>n = {row["n"]} forecasts in the report window. Ours is shown shifted online (without the shift: p50
{row["unshifted_p50_err_pct"]} %, p90 {row["unshifted_p90_err_pct"]} %). Start window calibrated online (as the
live controller does: from its recent forecasts, started or still waiting, a Kaplan-Meier estimate):
{row["window_online_coverage_pct"]} % of actual starts inside it, median width {row["window_online_width_h"]} h
({row["window_online_tuning_coverage_pct"]} %, {row["window_online_tuning_width_h"]} h on the tuning window).
The fixed window
({html.escape(row["window_shipped"])}): {row["window_coverage_pct"]} %. Target: {html.escape(row["target"])}.</p>
</body></html>
"""


def suite_row(out_dir: str | os.PathLike[str], progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`make sim-report`'s forecast-bluewaters row; writes forecast-bluewaters.html beside the others."""
    row = summary(run(progress))
    Path(out_dir, "forecast-bluewaters.html").write_text(render(row))
    return row
