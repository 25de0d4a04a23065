"""The live controller's start-time forecasts (corral.sim.forecast). Every `every_s` (longer when forecasts
take long: PAUSE_PER_FORECAST_S) the state is copied on the loop (`capture`: the active jobs and nodes,
64 ms at 12,000 jobs) and the engine is run forward on the copy in a worker thread, so a forecast never
holds the scheduling loop for its length. The runtime model learns from the jobs that ended before (`warm`:
the store's newest WARM_JOBS jobs) and from those that end (`learn`, called where results are committed).
Until the first forecast is made, and for a job the forecast leaves out, the core's reservation estimate
is shown."""
from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from corral.engine.engine import Engine
from corral.engine.records import Job
from corral.sim.forecast import DEFAULT_HORIZON_S, RuntimeModel, capture, forecast, observe_finished

log = logging.getLogger("corral.controller")

FORECAST_EVERY_S = 30.0
# A forecast runs in a thread of the controller's process, sharing its interpreter lock with the loop: the
# pause after one is at least this many times as long as it took, so forecasting takes at most a quarter of
# the process's time (10,000 pending jobs on 1,000 nodes took 100 s: one forecast every 5 minutes).
PAUSE_PER_FORECAST_S = 3.0
WARM_JOBS = 5000  # the newest jobs read from the store at start to learn runtimes from


class Forecasts:
    def __init__(self, every_s: float = FORECAST_EVERY_S, horizon_s: float = DEFAULT_HORIZON_S) -> None:
        self.every_s, self.horizon_s = every_s, horizon_s
        self.model = RuntimeModel()
        self.starts: Mapping[int, float] = {}  # pending job id -> forecast start, replaced whole
        self.made_at: float | None = None
        self.took_s: float | None = None

    def pause_s(self) -> float:
        """How long to wait before the next forecast."""
        return max(self.every_s, PAUSE_PER_FORECAST_S * (self.took_s or 0.0))

    def learn(self, jobs: Iterable[Job]) -> None:
        observe_finished(self.model, (job for job in jobs if job.state.terminal))

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
        model = copy.deepcopy(self.model)  # the loop goes on teaching the live one
        started = time.perf_counter()
        self.starts = await asyncio.to_thread(forecast, state, model, self.horizon_s)
        self.made_at, self.took_s = now, time.perf_counter() - started

    async def run(self, engine_now: Callable[[], Engine | None], clock: Callable[[], float],
                  history: Callable[[], list[Job]]) -> None:
        """Learn from `history`, then forecast every `every_s` while there is an engine (this controller
        leads)."""
        await self.warm(history)
        while True:
            await asyncio.sleep(self.pause_s())
            engine = engine_now()
            if engine is None or not engine.views.pending:
                self.starts = {}
                continue
            try:
                await self.make(engine, clock())
            except Exception:  # a failed forecast must not stop the next ones
                log.exception("start-time forecast failed")
