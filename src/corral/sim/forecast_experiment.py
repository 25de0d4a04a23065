"""`forecast-philly`: how good are start-time forecasts (sim/forecast.py) on the Philly replay?

The replay: the Philly jobs (Sia/Pollux list, `read_philly`) submitted in a window of WINDOW_DAYS days from
WINDOW_START, calibrated as the suite's second workload (every runtime x DURATION_SCALE: the raw list
barely queues, so there would be almost nothing to forecast), with the suite's time-limit model
(TimeLimitModel(seed=1)), under the suite's best isolated policy (each VC its own partition, backfill
with 8 reservations, age + small-GPU-time priority), each job's user its VC (the trace has no users; its
VC is the nearest thing). At every SAMPLE_EVERY_S of simulated time from WARMUP_S to WARMUP_S +
SAMPLE_SPAN_S the replay pauses, every pending job gets three forecasts from a copy of the engine:
(a) ours (runtimes from the limits x the VC's recent ratios actual/limit (sim/forecast.py), learnt from the
jobs the replay has finished so far), (b) the Slurm-style backfill estimate (the same forward run, every
runtime = its time limit), and (c), to tell the error's causes apart, the same forward run with every job's
true runtime (an oracle: what is left is the error of assuming no new arrivals). Then the replay goes on
to its end and each job's actual first start is read.

Error of a forecast made at t for a job that actually started at a: |forecast - a| / actual_wait, where
actual_wait = a - t (the wait still ahead of the job at the instant of the forecast, what the forecast
predicts), floored at MIN_WAIT_S so that jobs starting within a minute (pending only for a cycle) do not
divide by ~0. A job the forecast leaves out (not started within its horizon) counts with forecast =
t + horizon. Forecasts assume no new arrivals; in the replay jobs keep arriving, and higher-priority
arrivals delay waiting jobs: part of the error measured here.

The runtime model's own error is measured beside: for every forecast pending job, |predicted runtime -
true runtime| / true runtime. A start forecast is built from the predicted runtimes of the jobs ahead, so
this bounds what a better forward run could gain without better runtime predictions.
"""
from __future__ import annotations

import html
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from corral.engine.records import Job, JobState
from corral.sim.driver import SimNode, SimSubmission, Simulation
from corral.sim.experiment import Policy, _engine_setup, _submission
from corral.sim.forecast import DEFAULT_HORIZON_S, RuntimeModel, capture, forecast, observe_finished
from corral.sim.limits import TimeLimitModel
from corral.sim.traces.philly import philly_cluster, read_philly
from corral.sim.workload import Cluster, Workload

WINDOW_START = "2017-10-01 00:00:00"
WINDOW_DAYS = 21
WARMUP_S = 4 * 86400.0  # the queues fill up first
SAMPLE_SPAN_S = 14 * 86400.0
SAMPLE_EVERY_S = 2 * 3600.0
MIN_WAIT_S = 60.0
HORIZON_S = DEFAULT_HORIZON_S
POLICY = Policy("forecast-philly", isolated=True, backfill=True, weight_age=10_000, weight_job_size=10_000,
                favor_small=True)


@dataclass(frozen=True)
class Sample:
    at_s: float
    job_id: int
    ours_s: float
    baseline_s: float
    oracle_s: float
    predicted_runtime_s: float | None = None  # ours, for the runtime model's own error
    # Other runtime models' (name, forecast start, predicted runtime), forecast beside ours to compare them.
    others: tuple[tuple[str, float, float], ...] = ()


@dataclass
class ForecastOutcome:
    samples: list[Sample]
    actual: dict[int, float]  # job id -> first start
    forecast_wall_s: list[float]  # seconds per forecast (ours), with the pending count beside
    pending_counts: list[int]
    replay_jobs: int
    wall_s: float
    source: str  # which jobs were replayed
    sampled: tuple[float, float, float]  # (from, to, every) in simulated seconds
    durations: dict[int, float] | None = None  # job id -> true runtime
    asked: dict[int, tuple[str, float]] | None = None  # job id -> (user, time limit)


class TrueRuntimes(RuntimeModel):
    """The oracle: every job runs exactly what the replay will run it."""

    def __init__(self, durations: dict[int, float]) -> None:
        super().__init__()
        self.durations = durations

    def runtime(self, job: Job) -> float:
        return self.durations[job.id]

    def end(self, job: Job, now: float) -> float:
        return job.run_start + self.durations[job.id]


def workload(duration_scale: float, window_days: float = WINDOW_DAYS) -> Workload:
    """The replayed jobs: `duration_scale` is the suite's calibration (suite.DURATION_SCALE)."""
    raw = read_philly(start=WINDOW_START, end=_plus_days(WINDOW_START, window_days))
    scaled = raw.with_jobs([replace(job, duration_s=job.duration_s * duration_scale) for job in raw.jobs],
                           f"every runtime x {duration_scale:g}")
    return TimeLimitModel(seed=1).apply(scaled)


def run(jobs: Workload, warmup_s: float = WARMUP_S, span_s: float = SAMPLE_SPAN_S, every_s: float = SAMPLE_EVERY_S,
        progress: Callable[[str], None] | None = None, cluster: Cluster | None = None,
        policy: Policy = POLICY, model: RuntimeModel | None = None,
        others: Mapping[str, RuntimeModel] | None = None, references: bool = True,
        arrivals_s: Mapping[str, float] | None = None) -> ForecastOutcome:
    """The replay with forecasts sampled as the module says; `cluster` defaults to the Philly VCs, `model`
    (ours, learning as the replay goes) to RuntimeModel(). `others`: more runtime models, learning the same
    way, each forecast beside ours (Sample.others). `references=False` leaves out Slurm's estimate and the
    oracle (their forecasts are then NaN): the replay is deterministic, so one run with them serves all.
    `arrivals_s`: name -> a window W; ours is forecast again with the submissions of the last W replayed
    as arrivals of the next W (each running what ours predicts for it), in Sample.others under that name."""
    started = time.perf_counter()
    cluster = cluster if cluster is not None else philly_cluster()
    config, tenancy = _engine_setup(cluster, policy)
    sim = Simulation(config, [SimNode(n.name, n.gpus, n.cpus, n.mem_mib) for n in cluster.nodes], tenancy)
    # The isolated policy submits every job as one user; forecasts learn per user, so each job keeps its VC's.
    submissions = [replace(sub, request=sub.request.model_copy(update={"user": job.user}))
                   for job in jobs.jobs for sub in [_submission(job, policy)]]
    sim.submit(submissions)
    model, baseline = model if model is not None else RuntimeModel(), RuntimeModel.limits_only()
    oracle = TrueRuntimes({})
    samples: list[Sample] = []
    walls: list[float] = []
    counts: list[int] = []
    learnt = 0
    at = warmup_s
    while at <= warmup_s + span_s:
        sim.run(until_s=at)
        oracle.durations.update((job_id, jobs.jobs[i].duration_s) for i, job_id in sim.result.ids.items())
        for learner in (model, *(others or {}).values()):
            observe_finished(learner, sim.result.finished[learnt:])
        learnt = len(sim.result.finished)
        state = capture(sim.engine, at)
        t0 = time.perf_counter()
        ours = forecast(state, model, HORIZON_S)
        walls.append(time.perf_counter() - t0)
        counts.append(len(state.pending))
        slurm = forecast(state, baseline, HORIZON_S) if references else {}
        best = forecast(state, oracle, HORIZON_S) if references else {}
        theirs = {name: forecast(state, other, HORIZON_S) for name, other in (others or {}).items()}
        for name, window_s in (arrivals_s or {}).items():
            theirs[name] = forecast(state, model, HORIZON_S, arrivals=_replayed(submissions, model, at, window_s))
        never = at + HORIZON_S
        missing = never if references else float("nan")
        samples.extend(Sample(at, job.id, ours.get(job.id, never), slurm.get(job.id, missing),
                              best.get(job.id, missing), model.runtime(job),
                              tuple((name, theirs[name].get(job.id, never), other.runtime(job))
                                    for name, other in (others or {}).items())
                              + tuple((name, theirs[name].get(job.id, never), model.runtime(job))
                                      for name in (arrivals_s or {})))
                       for job in state.jobs if job.state is JobState.PENDING)
        if progress is not None:
            progress(f"t={at / 3600:.0f} h: {len(state.pending)} pending, forecast {walls[-1]:.2f} s")
        at += every_s
    sim.run()
    return ForecastOutcome(samples, dict(sim.result.first_starts), walls, counts, len(jobs.jobs),
                           time.perf_counter() - started, f"{jobs.source}; {'; '.join(jobs.notes)}",
                           (warmup_s, warmup_s + span_s, every_s),
                           {job_id: jobs.jobs[i].duration_s for i, job_id in sim.result.ids.items()},
                           {job_id: (jobs.jobs[i].user, float(jobs.jobs[i].time_limit_s or 0.0))
                            for i, job_id in sim.result.ids.items()})


def _replayed(submissions: list[SimSubmission], model: RuntimeModel, at: float,
              window_s: float) -> list[SimSubmission]:
    """The submissions of [at - window_s, at) again, window_s later, each running what `model` predicts
    (its user's ratio x its limit): an estimate of the arrivals still to come, from what is known at `at`."""
    found = []
    for sub in submissions:
        if at - window_s <= sub.at_s < at:
            limit = float(sub.request.time_limit_s or sub.duration_s)
            found.append(SimSubmission(sub.at_s + window_s, sub.request, limit * model.ratio(sub.request.user, limit)))
    return found


def errors(outcome: ForecastOutcome) -> dict[str, np.ndarray]:
    """|forecast - actual| / max(actual wait, MIN_WAIT_S) per sample: ours, the baseline's, the oracle's."""
    found: dict[str, list[float]] = {"ours": [], "baseline": [], "oracle": []}
    for s in outcome.samples:
        actual = outcome.actual.get(s.job_id)
        if actual is None:
            continue  # never started (refused or cancelled): nothing to compare with
        wait = max(actual - s.at_s, MIN_WAIT_S)
        for name, forecast_s in (("ours", s.ours_s), ("baseline", s.baseline_s), ("oracle", s.oracle_s)):
            found[name].append(abs(forecast_s - actual) / wait)
    return {name: np.array(values) for name, values in found.items()}


def runtime_errors(outcome: ForecastOutcome) -> np.ndarray:
    """|predicted runtime - true runtime| / true runtime per sample of a job that ran."""
    durations = outcome.durations or {}
    return np.array([abs(s.predicted_runtime_s - durations[s.job_id]) / durations[s.job_id]
                     for s in outcome.samples
                     if s.predicted_runtime_s is not None and s.job_id in outcome.actual
                     and durations.get(s.job_id, 0) > 0])


def pct(errors: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(errors, q)) * 100, 1) if len(errors) else None


def summary(outcome: ForecastOutcome) -> dict[str, Any]:
    err = errors(outcome)
    ours, slurm, oracle = err["ours"], err["baseline"], err["oracle"]
    runtime_err = runtime_errors(outcome)
    first, last, every = outcome.sampled
    return {
        "name": "forecast-philly",
        "setup": (f"{outcome.source} ({outcome.replay_jobs} jobs); 11 VCs isolated, 2,816 GPUs, "
                  f"{POLICY.describe()}; user = VC. Forecast every {every / 3600:g} h from {first / 3600:g} h to "
                  f"{last / 3600:g} h, every pending job. error = |forecast - actual start| "
                  f"/ max(actual start - forecast instant, {MIN_WAIT_S:g} s). Forecasts assume no new arrivals."),
        "n": len(ours),
        "instants": len(outcome.forecast_wall_s),
        "p50_err_pct": pct(ours, 50),
        "p90_err_pct": pct(ours, 90),
        "baseline_p50_err_pct": pct(slurm, 50),
        "baseline_p90_err_pct": pct(slurm, 90),
        "baseline": "Slurm-style backfill estimate: the same forward run of the engine, every runtime = its limit",
        "oracle_p50_err_pct": pct(oracle, 50),
        "oracle_p90_err_pct": pct(oracle, 90),
        "oracle": "the same forward run with every job's true runtime: the error left is that of assuming no "
                  "new arrivals",
        "runtime_p50_err_pct": pct(runtime_err, 50),
        "runtime_p90_err_pct": pct(runtime_err, 90),
        "runtime": "the runtime model alone: |predicted runtime - true runtime| / true runtime of the forecast "
                   "pending jobs",
        "within_15pct": round(float(np.mean(ours <= 0.15)) * 100, 1) if len(ours) else None,
        "target": "p50 <= 15 %, p90 <= 35 %",
        "forecast_wall_s_median": round(statistics.median(outcome.forecast_wall_s), 3),
        "forecast_wall_s_max": round(max(outcome.forecast_wall_s), 3),
        "pending_median": int(statistics.median(outcome.pending_counts)),
        "pending_max": max(outcome.pending_counts),
        "wall_s": round(outcome.wall_s, 1),
    }


def _plus_days(start: str, days: float) -> str:
    from datetime import datetime, timedelta

    moment = datetime.strptime(start, "%Y-%m-%d %H:%M:%S") + timedelta(days=days)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def render(row: dict[str, Any]) -> str:
    """reports/forecast-philly.html: the figures and what they mean, as a self-contained page."""
    lines = [("ours: limit x the median of the VC's recent ratios actual/limit (its jobs with the same limit "
              "first)", "p50_err_pct", "p90_err_pct"),
             ("Slurm-style: every runtime = its limit (the backfill estimate)", "baseline_p50_err_pct",
              "baseline_p90_err_pct"),
             ("oracle: every job's true runtime (only new arrivals unknown)", "oracle_p50_err_pct",
              "oracle_p90_err_pct")]
    table = "".join(f"<tr><td>{html.escape(name)}</td><td>{row[p50]}</td><td>{row[p90]}</td></tr>"
                    for name, p50, p90 in lines)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>corral simulate: forecast-philly</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}td,th{{border:1px solid #ccc;padding:3px 8px}}
table{{border-collapse:collapse}}</style></head><body>
<h1>Start-time forecasts on the Philly replay</h1>
<p>{html.escape(row["setup"])}</p>
<table><tr><th>forecast</th><th>p50 |error| / wait (%)</th><th>p90 (%)</th></tr>{table}</table>
<p>The runtime model alone (predicted against true runtime of the same pending jobs): p50
{row.get("runtime_p50_err_pct")} %, p90 {row.get("runtime_p90_err_pct")} %.</p>
<p>n = {row["n"]} forecasts (pending jobs x {row["instants"]} instants); {row["within_15pct"]} % of ours within 15 %.
Target: {html.escape(row["target"])}. One forecast (ours) took {row["forecast_wall_s_median"]} s (median),
{row["forecast_wall_s_max"]} s at most, with {row["pending_median"]} pending jobs (median; at most
{row["pending_max"]}).</p>
</body></html>
"""


def suite_row(out_dir: str | os.PathLike[str], duration_scale: float,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`make sim-report`'s forecast-philly row; writes forecast-philly.html beside the others."""
    row = summary(run(workload(duration_scale), progress=progress))
    Path(out_dir, "forecast-philly.html").write_text(render(row))
    return row
