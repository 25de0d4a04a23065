"""`forecast-philly`: how good are start-time forecasts (sim/forecast.py) on the Philly replay?

The replay: the Philly jobs (Sia/Pollux list, `read_philly`) submitted in a window of WINDOW_DAYS days from
WINDOW_START, with the suite's time-limit model (TimeLimitModel(seed=1)), under the suite's best isolated
policy (each VC its own partition, backfill with 8 reservations, age + small-GPU-time priority), each job's
user its VC (the trace has no users; its VC is the nearest thing). At every SAMPLE_EVERY_S of simulated time
from WARMUP_S to WARMUP_S + SAMPLE_SPAN_S the replay pauses, every pending job gets two forecasts from a copy
of the engine: (a) ours (runtimes from the limits x each VC's recent ratio actual/limit, learnt from the
jobs the replay has finished so far), (b) the Slurm-style backfill estimate (the same forward run, every
runtime = its time limit). Then the replay goes on to its end and each job's actual first start is read.

Error of a forecast made at t for a job that actually started at a: |forecast - a| / actual_wait, where
actual_wait = a - t (the wait still ahead of the job at the instant of the forecast, what the forecast
predicts), floored at MIN_WAIT_S so that jobs starting within a minute (pending only for a cycle) do not
divide by ~0. A job the forecast leaves out (not started within its horizon) counts with forecast =
t + horizon. Forecasts assume no new arrivals; in the replay jobs keep arriving, and higher-priority
arrivals delay waiting jobs: part of the error measured here.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from corral.sim.driver import SimNode, Simulation
from corral.sim.experiment import Policy, _engine_setup, _submission
from corral.sim.forecast import DEFAULT_HORIZON_S, RuntimeModel, capture, forecast, observe_finished
from corral.sim.limits import TimeLimitModel
from corral.sim.suite import DURATION_SCALE, scaled
from corral.sim.traces.philly import philly_cluster, read_philly

WINDOW_START = "2017-10-01 00:00:00"
WINDOW_DAYS = 21
WARMUP_S = 4 * 86400.0  # the queues fill up first
SAMPLE_SPAN_S = 14 * 86400.0
SAMPLE_EVERY_S = 3600.0
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


@dataclass
class ForecastOutcome:
    samples: list[Sample]
    actual: dict[int, float]  # job id -> first start
    forecast_wall_s: list[float]  # seconds per forecast (ours), with the pending count beside
    pending_counts: list[int]
    replay_jobs: int
    wall_s: float


def run(window_days: float = WINDOW_DAYS, warmup_s: float = WARMUP_S, span_s: float = SAMPLE_SPAN_S,
        every_s: float = SAMPLE_EVERY_S, progress: Callable[[str], None] | None = None) -> ForecastOutcome:
    started = time.perf_counter()
    end = _plus_days(WINDOW_START, window_days)
    workload = TimeLimitModel(seed=1).apply(scaled(read_philly(start=WINDOW_START, end=end), DURATION_SCALE))
    cluster = philly_cluster()
    config, tenancy = _engine_setup(cluster, POLICY)
    sim = Simulation(config, [SimNode(n.name, n.gpus, n.cpus, n.mem_mib) for n in cluster.nodes], tenancy)
    # The isolated policy submits every job as one user; forecasts learn per user, so each job keeps its VC's.
    sim.submit(replace(sub, request=sub.request.model_copy(update={"user": job.user}))
               for job in workload.jobs for sub in [_submission(job, POLICY)])
    model, baseline = RuntimeModel(), RuntimeModel.limits_only()
    samples: list[Sample] = []
    walls: list[float] = []
    counts: list[int] = []
    learnt = 0
    at = warmup_s
    while at <= warmup_s + span_s:
        sim.run(until_s=at)
        observe_finished(model, sim.result.finished[learnt:])
        learnt = len(sim.result.finished)
        state = capture(sim.engine, at)
        t0 = time.perf_counter()
        ours = forecast(state, model, HORIZON_S)
        walls.append(time.perf_counter() - t0)
        counts.append(len(state.pending))
        slurm = forecast(state, baseline, HORIZON_S)
        for job_id in state.pending:
            samples.append(Sample(at, job_id, ours.get(job_id, at + HORIZON_S), slurm.get(job_id, at + HORIZON_S)))
        if progress is not None:
            progress(f"t={at / 3600:.0f} h: {len(state.pending)} pending, forecast {walls[-1]:.2f} s")
        at += every_s
    sim.run()
    return ForecastOutcome(samples, dict(sim.result.first_starts), walls, counts, len(workload.jobs),
                           time.perf_counter() - started)


def errors(outcome: ForecastOutcome) -> tuple[np.ndarray, np.ndarray]:
    """|forecast - actual| / max(actual wait, MIN_WAIT_S) per sample, ours and the baseline's."""
    ours, slurm = [], []
    for s in outcome.samples:
        actual = outcome.actual.get(s.job_id)
        if actual is None:
            continue  # never started (refused or cancelled): nothing to compare with
        wait = max(actual - s.at_s, MIN_WAIT_S)
        ours.append(abs(s.ours_s - actual) / wait)
        slurm.append(abs(s.baseline_s - actual) / wait)
    return np.array(ours), np.array(slurm)


def summary(outcome: ForecastOutcome) -> dict[str, Any]:
    ours, slurm = errors(outcome)
    pct = (lambda a, q: round(float(np.percentile(a, q)) * 100, 1) if len(a) else None)
    return {
        "name": "forecast-philly",
        "setup": (f"Philly (Sia/Pollux job list) submitted {WINDOW_START} + {WINDOW_DAYS} days "
                  f"({outcome.replay_jobs} jobs), 11 VCs isolated, 2,816 GPUs, {POLICY.describe()}; user = VC. "
                  f"Forecast every {SAMPLE_EVERY_S / 3600:g} h from {WARMUP_S / 3600:g} h to "
                  f"{(WARMUP_S + SAMPLE_SPAN_S) / 3600:g} h, every pending job. error = |forecast - actual start| "
                  f"/ max(actual start - forecast instant, {MIN_WAIT_S:g} s). Forecasts assume no new arrivals."),
        "n": len(ours),
        "instants": len(outcome.forecast_wall_s),
        "p50_err_pct": pct(ours, 50),
        "p90_err_pct": pct(ours, 90),
        "baseline_p50_err_pct": pct(slurm, 50),
        "baseline_p90_err_pct": pct(slurm, 90),
        "baseline": "Slurm-style backfill estimate: the same forward run of the engine, every runtime = its limit",
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
