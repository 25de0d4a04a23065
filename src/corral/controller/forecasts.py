"""The live controller's start-time forecasts (corral.sim.forecast). At once when it starts leading, then
every `every_s`, and sooner (NEW_JOBS_AFTER_S) when jobs began waiting that the last forecast did not see
(longer when forecasts take long: PAUSE_PER_FORECAST_S), the state is copied on the loop (`capture`: the
active jobs and nodes, 64 ms at 12,000 jobs) and the engine is run forward on the copy in a process of its own
(`ForecastProcess`), so a forecast holds neither the scheduling loop nor the controller's interpreter lock
for its length (100 s with 10,000 pending jobs on 1,000 nodes). The runtime model learns from the jobs that
ended before (`warm`: the store's newest WARM_JOBS jobs) and from those that end (`learn`, called where
results are committed). Until the first forecast is made, and for a job the forecast leaves out, the core's
reservation estimate is shown: it has one for a job waiting on resources only, so a job waiting on its
queue's quota, a dependency or its array's task limit has an estimated start only from a forecast; hence
the prompt one for new jobs.

The forecasts shown and the start window around them are calibrated online (`OnlineWindow`): each pending
job's forecasts, one per OUTCOME_EVERY_S at most (the newest OUTCOMES_PER_JOB), are kept, and at each forecast
the ratios actual / forecast wait of those whose jobs started, with the bounds of those whose jobs still wait,
give the window and a shift of the forecasts (`OnlineWindow.calibrated`); until ONLINE_MIN_OUTCOMES jobs have
started, START_WINDOW's fixed factors and no shift."""
from __future__ import annotations

import asyncio
import copy
import logging
import multiprocessing
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from multiprocessing.connection import Connection
from typing import Any

from corral.engine.engine import Engine
from corral.engine.records import Job, JobState
from corral.sim.forecast import (
    DEFAULT_HORIZON_S,
    LIVE_QUANTILE,
    START_WINDOW,
    EngineState,
    OnlineWindow,
    RuntimeModel,
    StartWindow,
    capture,
    forecast,
    observe_finished,
)

log = logging.getLogger("corral.controller")

FORECAST_EVERY_S = 30.0
# The pause after a forecast is at least this many times as long as it took, so forecasting keeps at most a
# quarter of a core busy (10,000 pending jobs on 1,000 nodes took 100 s: one forecast every 5 minutes).
PAUSE_PER_FORECAST_S = 3.0
CHILD_EXIT_WAIT_S = 5.0
# A job that began waiting since the last forecast is forecast this soon after it (and the pause above).
NEW_JOBS_AFTER_S = 2.0
POLL_S = 1.0  # how often the loop looks whether a forecast is due
WARM_JOBS = 5000  # the newest jobs read from the store at start to learn runtimes from
# The window learns from at most one forecast per job this often (forecasts come every 30 s; a job that
# waits long must not fill the window's memory alone), and from at most OUTCOMES_PER_JOB of them, the newest.
OUTCOME_EVERY_S = 1800.0
OUTCOMES_PER_JOB = 8


class ForecastFailed(Exception):
    """The forecast process could not make a forecast (it died, or the forward run raised)."""


class ForecastProcess:
    """Runs `forecast` in a child process of its own, started (spawned: a fresh interpreter, none of the
    controller's threads, sockets or locks) at the first forecast and kept for the next ones. What still
    shares the controller's interpreter lock is pickling the copy to it, from a worker thread (0.3 s at
    10,000 jobs, in which the loop waited up to 0.1 s at a time: bench/forecast.py --loop). A child that
    died (killed, out of memory) fails the forecast it ran, and the next forecast starts another; a
    controller that dies, even killed outright, ends its child (it reads end of file on the pipe)."""

    def __init__(self) -> None:
        self._child: multiprocessing.process.BaseProcess | None = None
        self._pipe: Connection | None = None

    @property
    def pid(self) -> int | None:
        return None if self._child is None else self._child.pid

    async def forecast(self, state: EngineState, model: RuntimeModel, horizon_s: float) -> dict[int, float]:
        if self._child is None or self._pipe is None or not self._child.is_alive():
            self.close()
            self._start()
        assert self._pipe is not None
        try:
            return await asyncio.to_thread(_ask, self._pipe, (state, model, horizon_s))
        except (EOFError, OSError) as exc:
            if self._child is not None:  # its pipe closed as it died: reap it, so that its status is known
                await asyncio.to_thread(self._child.join, CHILD_EXIT_WAIT_S)
            code = None if self._child is None else self._child.exitcode
            self.close()
            raise ForecastFailed(f"the forecast process ended (exit status {code})") from exc

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        child = context.Process(target=_serve_forecasts, args=(theirs,), name="corral-forecasts", daemon=True)
        child.start()
        theirs.close()
        self._child, self._pipe = child, ours

    def close(self) -> None:
        """Stop the child (a forecast it is running is given up)."""
        child, pipe, self._child, self._pipe = self._child, self._pipe, None, None
        if child is not None:
            child.kill()
            child.join(CHILD_EXIT_WAIT_S)
            if child.exitcode is not None:  # else still dying (in the kernel): left to be reaped at exit
                child.close()
        if pipe is not None:
            pipe.close()


def _ask(pipe: Connection, question: tuple[EngineState, RuntimeModel, float]) -> dict[int, float]:
    pipe.send(question)
    status, answer = pipe.recv()
    if status != "ok":
        raise ForecastFailed(answer)
    return answer


def _serve_forecasts(pipe: Connection) -> None:
    """The child: a forecast for each question, until the controller closes the pipe (or dies)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the terminal is the controller's to handle
    while True:
        try:
            state, model, horizon_s = pipe.recv()
        except EOFError:
            return
        try:
            reply: tuple[str, Any] = ("ok", forecast(state, model, horizon_s))
        except Exception as exc:
            reply = ("error", f"{type(exc).__name__}: {exc}")
        pipe.send(reply)


class Forecasts:
    def __init__(self, every_s: float = FORECAST_EVERY_S, horizon_s: float = DEFAULT_HORIZON_S) -> None:
        self.every_s, self.horizon_s = every_s, horizon_s
        self.process = ForecastProcess()
        self.model = RuntimeModel(quantile=LIVE_QUANTILE)
        self.starts: Mapping[int, float] = {}  # pending job id -> forecast start as shown (shifted), replaced whole
        self.seen: frozenset[int] = frozenset()  # the pending jobs the last forecast was made for
        self.made_at: float | None = None
        self.took_s: float | None = None
        self.calibration = OnlineWindow(START_WINDOW, per_job=OUTCOMES_PER_JOB)
        self.window: StartWindow = START_WINDOW  # around `starts`, as calibrated at the last forecast

    def pause_s(self) -> float:
        """How long to wait before the next forecast."""
        return max(self.every_s, PAUSE_PER_FORECAST_S * (self.took_s or 0.0))

    def due(self, pending: Iterable[int], now: float) -> bool:
        """Whether to forecast now, with these jobs pending: the first time at once, then every pause_s(),
        or once NEW_JOBS_AFTER_S (and the slow-forecast pause) has passed if a job waits that the last
        forecast did not see (submitted, requeued or released since)."""
        if self.made_at is None:
            return True
        since = now - self.made_at - (self.took_s or 0.0)
        if since >= self.pause_s():
            return True
        if since < max(NEW_JOBS_AFTER_S, PAUSE_PER_FORECAST_S * (self.took_s or 0.0)):
            return False
        return any(job_id not in self.seen for job_id in pending)

    def learn(self, jobs: Iterable[Job]) -> None:
        """Jobs that changed: the finished ones teach the runtime model, the started ones the calibration (a
        job that ended without starting again, cancelled, teaches nothing)."""
        ended = []
        for job in jobs:
            if job.state is not JobState.PENDING and self.calibration.knows(job.id):
                if job.start_time is not None:
                    self.calibration.started(job.id, job.start_time)
                if job.state.terminal:
                    self.calibration.dropped(job.id)
            if job.state.terminal:
                ended.append(job)
        observe_finished(self.model, ended)

    def _remember(self, starts: Mapping[int, float], now: float) -> None:
        """Keep this forecast of each job, one per OUTCOME_EVERY_S."""
        for job_id, start in starts.items():
            kept = self.calibration.forecasts_of(job_id)
            if not kept or now - kept[-1][0] >= OUTCOME_EVERY_S:
                self.calibration.forecast(job_id, now, start)

    async def warm(self, history: Callable[[], list[Job]]) -> None:
        """Learn from the jobs that ended before this controller led (`history` reads them from the store,
        in a worker thread), oldest end first."""
        try:
            ended = await asyncio.to_thread(history)
        except Exception as exc:  # forecasts then start from time limits alone
            log.warning("start-time forecasts: cannot read finished jobs (%s)", exc)
            return
        self.learn(sorted(ended, key=lambda job: job.end_time or 0.0))

    async def make(self, engine: Engine, now: float) -> None:
        """One forecast of `engine` as it is now; its copy is taken before the first await."""
        state = capture(engine, now)
        model = copy.deepcopy(self.model)  # the loop goes on teaching the live one while the copy is pickled
        started = time.perf_counter()
        found = await self.process.forecast(state, model, self.horizon_s)
        # Calibrated from the earlier forecasts, as forecast_bluewaters.online_windows replays it.
        shift, self.window = self.calibration.calibrated(now)
        self.starts = {job_id: self.calibration.shifted(now, start, shift) for job_id, start in found.items()}
        pending = engine.views.pending  # a job that started while the forecast ran is not awaited
        self._remember({job_id: start for job_id, start in found.items() if job_id in pending}, now)
        self.seen = frozenset(state.pending)
        self.made_at, self.took_s = now, time.perf_counter() - started

    async def run(self, engine_now: Callable[[], Engine | None], clock: Callable[[], float],
                  history: Callable[[], list[Job]]) -> None:
        """Learn from `history`, then forecast while there is an engine (this controller leads) and a job
        waits, when due()."""
        await self.warm(history)
        while True:
            engine = engine_now()
            if engine is None or not engine.views.pending:
                self.starts, self.seen = {}, frozenset()
                if engine is None:  # a standby's child would only hold memory
                    self.process.close()
                    self.calibration.forget_waiting()  # the leader that takes over sees these jobs start
                    self.made_at = None  # when it leads again: a forecast at once
            elif self.due(engine.views.pending, clock()):
                try:
                    await self.make(engine, clock())
                except Exception:  # a failed forecast must not stop the next ones
                    log.exception("start-time forecast failed")
                    # Tried for these jobs: the next try after a whole pause, not at once.
                    self.made_at, self.took_s, self.seen = clock(), 0.0, frozenset(engine.views.pending)
            await asyncio.sleep(POLL_S)

    def close(self) -> None:
        self.process.close()
