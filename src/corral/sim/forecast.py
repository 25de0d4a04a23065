"""Start-time forecasts: when will each pending job start?

A forecast runs the production engine forward in simulated time on a copy of the live state (the
simulator's driver, sim/driver.py: `Simulation.resume`), so it plans with exactly the policy that will
decide (priorities, quotas, backfill, preemption, reservations). Each running job ends when the runtime
model says, each pending job, once started, runs what the model predicts for it; nothing new is submitted
(a forecast assumes no new arrivals, so a job may start later than forecast when a higher-priority one
arrives). A job's forecast is its first simulated start; a job that has not started by the horizon gets
none.

The runtime model (RuntimeModel) predicts a job's runtime from its time limit and its user's history: the
time limit x the median of the recent ratios actual runtime / time limit of the user's jobs that asked for
the same limit (users resubmit the same work with the same limit); with too few of those, of all the
user's jobs; then of everyone's; 1 with no history at all. Never more than the limit; a
running job ends at the median of those ratios that are longer than it has run so far. The
Slurm-style estimate (what backfill plans with) is the same forward run with every runtime = the time
limit: `RuntimeModel.limits_only()`.

A start window (StartWindow) goes beside the point forecast, because users plan by its late end: the
actual wait is taken to lie within [low, high] x the forecast wait, both factors calibrated (conformal: the
10th and 90th percentiles of actual / forecast wait, each plus PAD) on the tuning window of the
`forecast-bluewaters` replay (sim/forecast_bluewaters.py), which also measures its coverage on a separate
window. Those fixed factors did not carry from one window to the next (80 % there, 35 % on the next), so
live forecasts calibrate online instead (OnlineWindow: the quantiles of a Kaplan-Meier estimate of the ratios
over the newest forecasts, a job still waiting counted as at least as late as it is, whose median also
shifts the point forecasts), with START_WINDOW's factors only until enough of their jobs have started.

`capture` copies what a forecast needs (the active jobs, nodes, tenancy, fair-share usage, reservations)
cheaply, under the caller's loop; `forecast` then needs nothing else and may run in another thread.
"""
from __future__ import annotations

import bisect
import copy
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from corral.api.tenancy import TenancySpec
from corral.engine.build import build_engine
from corral.engine.config import SIMULATED, EngineConfig
from corral.engine.engine import Engine
from corral.engine.records import Job, JobState, Node, Service
from corral.sim.driver import SimSubmission, Simulation

DEFAULT_HORIZON_S = 30 * 86400.0
CYCLE_EVERY_S = 60.0


class RuntimeModel:
    """Predicted runtime = time limit x a ratio actual/limit learnt from finished jobs."""

    def __init__(self, per_user: int = 20, min_user_samples: int = 3, global_window: int = 1000,
                 use_history: bool = True, quantile: float = 0.5) -> None:
        if per_user < 1 or min_user_samples < 1 or global_window < 1:
            raise ValueError("per_user, min_user_samples and global_window must be at least 1")
        if not 0.0 <= quantile <= 1.0:
            raise ValueError(f"quantile {quantile}: must be within [0, 1]")
        self.quantile = quantile
        self.per_user, self.min_user_samples = per_user, min_user_samples
        self.use_history = use_history
        # Recent ratios by (user, limit) and by user; everyone's in _global.
        self._recent: dict[tuple[str, float] | str, deque[float]] = {}
        self._global: deque[float] = deque(maxlen=global_window)
        self._sorted: dict[tuple[str, float] | str | None, list[float]] = {}  # by key (None: everyone)

    @classmethod
    def limits_only(cls) -> RuntimeModel:
        """Every job runs its time limit: the Slurm backfill estimate."""
        return cls(use_history=False)

    def observe(self, user: str, runtime_s: float, limit_s: float) -> None:
        """A finished job: how long it ran against the limit it asked for."""
        if limit_s <= 0:
            return
        ratio = min(1.0, max(0.0, runtime_s / limit_s))
        for key in ((user, limit_s), user):
            self._recent.setdefault(key, deque(maxlen=self.per_user)).append(ratio)
            self._sorted.pop(key, None)
        self._global.append(ratio)
        self._sorted.pop(None, None)

    def _ratios(self, user: str, limit_s: float) -> list[float]:
        """The ratios predictions use, sorted: those of the user's jobs with this limit, else the user's,
        else everyone's, else [1.0]."""
        if not self.use_history:
            return [1.0]
        key: tuple[str, float] | str | None = None
        for candidate in ((user, limit_s), user):
            if len(self._recent.get(candidate, ())) >= self.min_user_samples:
                key = candidate
                break
        found = self._sorted.get(key)
        if found is None:
            found = self._sorted[key] = sorted(self._recent[key] if key is not None else self._global) or [1.0]
        return found

    def ratio(self, user: str, limit_s: float) -> float:
        return self._quantile(self._ratios(user, limit_s))

    def _quantile(self, ordered: list[float]) -> float:
        """The model's quantile of sorted ratios, interpolated (0.5: the median)."""
        at = self.quantile * (len(ordered) - 1)
        low = int(at)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (at - low)

    def runtime(self, job: Job) -> float:
        limit = limit_of(job)
        return limit * self.ratio(job.spec.user, limit)

    def end(self, job: Job, now: float) -> float:
        """When a running job is predicted to end: the median of the ratios longer than what it has run
        already (the history's conditional median). One that has outlived every ratio is expected to run
        as long again (a long runner's remaining time grows with its age), never past its limit."""
        start, limit = job.run_start, limit_of(job)
        ratios = self._ratios(job.spec.user, limit)
        longer = ratios[bisect.bisect_right(ratios, (now - start) / limit):]
        if longer:
            return start + limit * self._quantile(longer)
        return min(start + limit, now + (now - start))


class HistoryQuantiles(RuntimeModel):
    """RuntimeModel whose quantile depends on the user's history size: `few` while fewer than `few_below` of
    the user's jobs have finished (the ratios then come from a handful of jobs, or from everyone's),
    `quantile` otherwise (at most `per_user` are kept, so `few_below` <= per_user). A running job's end is
    RuntimeModel's (`quantile`). Tried on forecast-bluewaters' tuning window and not shipped: it left the
    start forecasts there as they were (docs/results.md)."""

    def __init__(self, quantile: float = 0.7, few: float = 0.85, few_below: int = 10) -> None:
        super().__init__(quantile=quantile)
        if not 0.0 <= few <= 1.0:
            raise ValueError(f"few {few}: must be within [0, 1]")
        if few_below < 1:
            raise ValueError("few_below must be at least 1")
        self.few, self.few_below = few, few_below

    def ratio(self, user: str, limit_s: float) -> float:
        history = len(self._recent.get(user, ()))
        return _interpolated(self._ratios(user, limit_s), self.few if history < self.few_below else self.quantile)


class RecentRuntimes(RuntimeModel):
    """Predicted runtime = the mean of the user's last `last` runtimes with the same limit, else of the
    user's last ones with any limit (Tsafrir, Etsion and Feitelson 2007: users' successive jobs run alike),
    never more than the limit; a user with no finished job falls back to RuntimeModel (everyone's ratios).
    A running job that has outlived its prediction ends as RuntimeModel.end says."""

    def __init__(self, last: int = 2, quantile: float = 0.7) -> None:
        super().__init__(quantile=quantile)
        if last < 1:
            raise ValueError("last must be at least 1")
        self.last = last
        self._runtimes: dict[tuple[str, float] | str, deque[float]] = {}

    def observe(self, user: str, runtime_s: float, limit_s: float) -> None:
        super().observe(user, runtime_s, limit_s)
        if limit_s <= 0:
            return
        for key in ((user, limit_s), user):
            self._runtimes.setdefault(key, deque(maxlen=self.last)).append(min(max(runtime_s, 0.0), limit_s))

    def runtime(self, job: Job) -> float:
        limit = limit_of(job)
        for key in ((job.spec.user, limit), job.spec.user):
            recent = self._runtimes.get(key)
            if recent:
                return min(limit, sum(recent) / len(recent))
        return super().runtime(job)

    def end(self, job: Job, now: float) -> float:
        predicted = job.run_start + self.runtime(job)
        return predicted if predicted > now else super().end(job, now)


@dataclass(frozen=True)
class StartWindow:
    """The window around a point forecast: wait x [low, high], waits counted with `pad_s` added so that a
    forecast of "now" still gets a window."""
    low: float
    high: float
    pad_s: float = 600.0

    def bounds(self, at: float, forecast_s: float) -> tuple[float, float]:
        """(earliest, latest) start for a job forecast at `at` to start at `forecast_s`; always holds it."""
        wait = max(0.0, forecast_s - at) + self.pad_s
        earliest = at + max(0.0, wait * self.low - self.pad_s)
        latest = at + wait * self.high - self.pad_s
        return min(earliest, forecast_s), max(latest, forecast_s)

    @classmethod
    def calibrate(cls, samples: Iterable[tuple[float, float, float]], covered: float = 0.8,
                  pad_s: float = 600.0) -> StartWindow | None:
        """From (instant, forecast, actual start) samples: the central `covered` share of the ratios
        (actual wait + pad) / (forecast wait + pad). None without samples."""
        ratios = sorted((max(0.0, actual - at) + pad_s) / (max(0.0, forecast_s - at) + pad_s)
                        for at, forecast_s, actual in samples)
        if not ratios:
            return None
        tail = (1.0 - covered) / 2
        return cls(_interpolated(ratios, tail), _interpolated(ratios, 1.0 - tail), pad_s)

    def describe(self) -> str:
        return (f"actual wait within {self.low:.3g}x to {self.high:.3g}x the forecast wait, waits counted "
                f"+{self.pad_s:g} s")


# The online window's settings (docs/results.md): it asks for the 80 % it should hold, and its memory is the
# shortest that held 80 % of forecast-bluewaters' tuning window's starts so (700 forecasts: 80.6 %; 300 to
# 600 held 71-79 %), chosen on that window alone.
ONLINE_KEEP = 700
ONLINE_MIN_OUTCOMES = 30
ONLINE_COVERED = 0.8
# Forecasts are shifted by the estimate's median to this power: 0.25 / 0.5 / 0.75 / 1 gave p50 21.8 / 22.3 /
# 26.0 / 28.2 % and p90 89.4 / 89.3 / 96.9 / 97.3 % on the tuning window (none: 23.7 / 89.6 %).
ONLINE_SHIFT_POWER = 0.25


class OnlineWindow:
    """A start window calibrated online, as a live controller can: from its own recent forecasts, the newest
    `keep` of them, and what became of each. A forecast whose job has started gives its ratio (actual wait +
    pad) / (forecast wait + pad); one whose job still waits at `now` gives only a bound, the ratio is at
    least (now - instant + pad) / (forecast wait + pad): a censored observation. The window is the central
    `covered` share of the Kaplan-Meier estimate of the ratios' distribution (`censored_quantiles`), and
    `prior` until `min_outcomes` have started. Counting the starts alone would be biased to short waits:
    at any instant the jobs still waiting are exactly the late ones (forecast-bluewaters: a window from the
    starts alone had to ask for their central 97 % to hold 80 % of the tuning window's starts). The same
    estimate's median corrects the point forecast (`calibrated`: forecasts came systematically early).
    A forecast is recorded with `forecast`, its job's start with `started`; a job that ends unstarted is
    forgotten (`dropped`)."""

    def __init__(self, prior: StartWindow, keep: int = ONLINE_KEEP, min_outcomes: int = ONLINE_MIN_OUTCOMES,
                 covered: float = ONLINE_COVERED, shift_power: float = ONLINE_SHIFT_POWER,
                 per_job: int | None = None) -> None:
        if keep < 1 or min_outcomes < 1 or min_outcomes > keep:
            raise ValueError("need 1 <= min_outcomes <= keep")
        if per_job is not None and per_job < 1:
            raise ValueError("per_job must be at least 1")
        if not 0.0 < covered < 1.0:
            raise ValueError(f"covered {covered}: must be within (0, 1)")
        if not 0.0 <= shift_power <= 1.0:
            raise ValueError(f"shift_power {shift_power}: must be within [0, 1]")
        self.prior, self.keep, self.min_outcomes, self.covered = prior, keep, min_outcomes, covered
        self.shift_power, self.per_job = shift_power, per_job
        self._kept: deque[_Forecast] = deque()  # oldest first
        self._by_job: dict[Hashable, list[_Forecast]] = {}

    def forecast(self, job: Hashable, at: float, forecast_s: float) -> None:
        """The job, pending at `at`, was forecast to start at `forecast_s`. Past `per_job` forecasts of one
        job, its oldest is forgotten (a job that waits long must not fill the memory alone)."""
        made = _Forecast(job, at, forecast_s)
        self._kept.append(made)
        mine = self._by_job.setdefault(job, [])
        mine.append(made)
        if self.per_job is not None and len(mine) > self.per_job:
            oldest = mine[0]
            self._forget(oldest)
            self._kept.remove(oldest)
        while len(self._kept) > self.keep:
            self._forget(self._kept.popleft())

    def started(self, job: Hashable, actual_s: float) -> None:
        """The job started at `actual_s`: its forecasts made until then have their outcome."""
        for made in self._by_job.get(job, ()):
            if made.at <= actual_s and made.actual_s is None:
                made.actual_s = actual_s

    def dropped(self, job: Hashable) -> None:
        """The job ended without starting again (cancelled): its forecasts not followed by a start teach
        nothing."""
        for made in [made for made in self._by_job.get(job, ()) if made.actual_s is None]:
            self._forget(made)
            self._kept.remove(made)

    def knows(self, job: Hashable) -> bool:
        """Whether a forecast of the job is kept."""
        return job in self._by_job

    def forget_waiting(self) -> None:
        """Forget the forecasts of jobs not started yet (a controller that stops leading will not see them
        start; counted as waiting for ever, they would widen the window)."""
        for made in [made for made in self._kept if made.actual_s is None]:
            self._forget(made)
        self._kept = deque(made for made in self._kept if made.actual_s is not None)

    def forecasts_of(self, job: Hashable) -> list[tuple[float, float]]:
        """The kept (instant, forecast start)s of a job, oldest first."""
        return [(made.at, made.forecast_s) for made in self._by_job.get(job, ())]

    def _forget(self, made: _Forecast) -> None:
        mine = self._by_job.get(made.job)
        if mine is not None:
            mine.remove(made)
            if not mine:
                del self._by_job[made.job]

    @property
    def outcomes(self) -> int:
        """How many kept forecasts have a start."""
        return sum(1 for made in self._kept if made.actual_s is not None)

    def ratios(self, now: float) -> list[tuple[float, bool]]:
        """(ratio, observed) per kept forecast at `now`: observed for a started job, else the censored bound."""
        pad = self.prior.pad_s
        found = []
        for made in self._kept:
            ended = made.actual_s is not None and made.actual_s <= now
            until = made.actual_s if made.actual_s is not None and ended else max(now, made.at)
            found.append(((until - made.at + pad) / (max(0.0, made.forecast_s - made.at) + pad), ended))
        return found

    def calibrated(self, now: float) -> tuple[float, StartWindow]:
        """(shift, window) to show at `now`: a forecast's wait (+ pad) is multiplied by `shift`, the median
        of the estimate to the power `shift_power` (forecasts that came late lately are moved later), and the
        window is around the shifted forecast. Where the estimate does not reach a quantile (too many of the
        late ones still wait), it is the largest ratio of a started job: a lower bound of it (the largest
        bound of a waiting one, tried too, made the tuning window's windows wider for the same coverage)."""
        observations = self.ratios(now)
        started = [value for value, observed in observations if observed]
        if len(started) < self.min_outcomes:
            return 1.0, self.prior
        tail = (1.0 - self.covered) / 2
        largest = max(started)
        low, median, high = (largest if found is None else found
                             for found in censored_quantiles(observations, (tail, 0.5, 1.0 - tail)))
        shift = median ** self.shift_power
        return shift, StartWindow(low / shift, high / shift, self.prior.pad_s)

    def window(self, now: float) -> StartWindow:
        """The window around a shifted forecast at `now` (`calibrated`)."""
        return self.calibrated(now)[1]

    def shifted(self, at: float, forecast_s: float, shift: float) -> float:
        """A forecast made at `at` for `forecast_s`, its wait (+ pad) multiplied by `shift`."""
        pad = self.prior.pad_s
        return at + max(0.0, (max(0.0, forecast_s - at) + pad) * shift - pad)


@dataclass(eq=False)  # each forecast is itself: two alike are still two
class _Forecast:
    job: Hashable
    at: float
    forecast_s: float
    actual_s: float | None = None


def censored_quantiles(observations: Iterable[tuple[float, bool]], qs: Iterable[float]) -> list[float | None]:
    """The `qs` quantiles of a distribution estimated (Kaplan-Meier) from (value, observed) pairs, where a
    value not observed is a lower bound (censored: the true value is at least it). A quantile the estimate
    does not reach (the largest values are all censored) is None."""
    ordered = sorted(observations, key=lambda pair: (pair[0], not pair[1]))  # at a tie, events first
    wanted = sorted((q, i) for i, q in enumerate(qs))
    found: list[float | None] = [None] * len(wanted)
    at_risk, survival, next_q = len(ordered), 1.0, 0
    i = 0
    while i < len(ordered) and next_q < len(wanted):
        value, events, leaving = ordered[i][0], 0, 0
        while i < len(ordered) and ordered[i][0] == value:
            events += ordered[i][1]
            leaving += 1
            i += 1
        if events:
            survival *= 1.0 - events / at_risk
            while next_q < len(wanted) and 1.0 - survival >= wanted[next_q][0] - 1e-12:
                found[wanted[next_q][1]] = value
                next_q += 1
        at_risk -= leaving
    return found


def _interpolated(ordered: list[float], q: float) -> float:
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


# Calibrated on forecast-bluewaters' tuning window (2026-11-28, quantile 0.7; see docs/results.md: it covers
# 80 % there by construction but only 35 % of the report window's starts).
START_WINDOW = StartWindow(low=0.874, high=2.96)
# The live model's quantile of the ratios actual/limit, tuned on forecast-bluewaters' tuning window (real
# user limits: 0.5 / 0.7 / 0.85 / 0.95 gave p50 42 / 24 / 22 / 20 %, p90 89 / 90 / 98 / 106 %).
# RuntimeModel's default stays the median, which forecast-philly measures (its limits are synthetic).
LIVE_QUANTILE = 0.7


@dataclass(frozen=True)
class EngineState:
    """What a forecast reads: a private copy of the engine's active state at `now`."""
    now: float
    config: EngineConfig
    jobs: tuple[Job, ...]
    nodes: tuple[Node, ...]
    tenancy: TenancySpec
    fairshare: dict[str, Any]
    reservations: list[dict[str, Any]]
    ended: dict[int, tuple[JobState, bool]]
    next_job_id: int
    # The services, whose replicas among `jobs` restart or are replaced by their rules in the forecast too.
    services: tuple[Service, ...] = ()

    @property
    def pending(self) -> list[int]:
        return [j.id for j in self.jobs if j.state is JobState.PENDING]


def capture(engine: Engine, now: float) -> EngineState:
    """Copy the engine's active state; its records are never shared with the copy (specs, which never
    change, are)."""
    jobs = tuple(copy_job(job) for job in engine.jobs.values())
    fairshare = copy.deepcopy(engine.fairshare.state())
    return EngineState(now, engine.config, jobs, tuple(copy.copy(n) for n in engine.nodes.values()),
                       engine.tenancy.spec, fairshare, engine.reservations.to_json(), dict(engine.life.ended),
                       engine.next_job_id, tuple(copy.deepcopy(s) for s in engine.services.values()))


def forecast(state: EngineState, model: RuntimeModel, horizon_s: float = DEFAULT_HORIZON_S,
             stop_delay_s: float = 1.0, cycle_every_s: float = CYCLE_EVERY_S,
             arrivals: Iterable[SimSubmission] = ()) -> dict[int, float]:
    """Pending job id -> its predicted start; jobs that do not start within `horizon_s` are left out.
    `cycle_every_s`: simulated cycles at most this often (ends closer together share one), which bounds
    the forecast's cost by the horizon rather than by the number of jobs, at that much precision.
    `arrivals`: jobs expected to be submitted after `state.now` (an estimate: by default none arrive)."""
    jobs = [copy_job(job) for job in state.jobs]  # the state stays reusable
    engine = build_engine(state.config, SIMULATED, jobs=jobs, nodes=[copy.copy(n) for n in state.nodes],
                          next_job_id=state.next_job_id, tenancy=state.tenancy,
                          fairshare_state=copy.deepcopy(state.fairshare), reservations=state.reservations,
                          services=[copy.deepcopy(s) for s in state.services])
    engine.life.ended.update(state.ended)
    now = state.now
    running_ends = {j.id: _running_end(j, model, now, stop_delay_s) for j in jobs if j.state is not JobState.PENDING}
    durations = {j.id: model.runtime(j) for j in jobs}
    sim = Simulation.resume(engine, now, running_ends, durations, stop_delay_s=stop_delay_s,
                            min_cycle_interval_s=cycle_every_s)
    sim.submit(arrivals)
    waiting = set(state.pending)
    starts = sim.result.first_starts

    def all_started() -> bool:  # running jobs preempted and started again count too, hence the subset test
        return len(starts) >= len(waiting) and waiting <= starts.keys()

    sim.run(until_s=now + horizon_s, done=all_started)
    return {job_id: starts[job_id] for job_id in state.pending if job_id in starts}


def copy_job(job: Job) -> Job:
    """A copy sharing nothing the engine changes: its spec is replaced, never changed, and so is shared; its
    slices are immutable, and so are history entries; runs and steps are copied (a deepcopy costs ten times
    more)."""
    twin = copy.copy(job)
    twin.runs = {node: copy.copy(run) for node, run in job.runs.items()}
    twin.history = list(job.history)
    twin.steps = copy.deepcopy(job.steps) if job.steps else []
    return twin


def _running_end(job: Job, model: RuntimeModel, now: float, stop_delay_s: float) -> float:
    if job.state is JobState.COMPLETING:
        return now + stop_delay_s
    return model.end(job, now)


def limit_of(job: Job) -> float:
    return float(job.spec.request.time_limit_s)


def observe_finished(model: RuntimeModel, jobs: Iterable[Job]) -> None:
    """Teach the model from ended jobs that ran (their last run: start to end)."""
    for job in jobs:
        if job.start_time is not None and job.end_time is not None:
            model.observe(job.spec.user, job.end_time - job.start_time, limit_of(job))
