"""The controller's scheduling loop and lifecycle: start, stop, and a cycle whenever something changed or
the engine's next deadline comes due (see service_core.py for the state-store contract)."""
from __future__ import annotations

import asyncio
import logging
import time

from corral.controller.forecasts import WARM_JOBS
from corral.controller.leadership import NotLeader
from corral.controller.service_core import ServiceCore
from corral.controller.session_idle import SessionIdleWatch
from corral.controller.writer import StoreUnavailable
from corral.engine import events as ev
from corral.engine.pacer import CyclePacer
from corral.engine.records import Job, JobState
from corral.engine.result import Result

log = logging.getLogger("corral.controller")


class SchedulingLoop(ServiceCore):
    """Starting and stopping the controller, and its scheduling loop."""

    # ----- lifecycle

    async def start(self) -> None:
        self._wake = asyncio.Event()
        if self.leadership is not None:
            await self.leadership.first_turn()  # a lone controller leads, engine built, before it answers
            self._lease_task = asyncio.create_task(self.leadership.run(), name="corral-lease")
        # The probe first: it starts counting before the loop's first cycle can take a stall.
        self._stall_task = asyncio.create_task(self._stalls.probe(), name="corral-stall-probe")
        self._task = asyncio.create_task(self._loop(), name="corral-scheduler")
        self._forecast_task = asyncio.create_task(
            self.forecasts.run(lambda: self._engine, self.clock, self.recent_ended_jobs), name="corral-forecasts")
        watch = SessionIdleWatch(lambda: self._engine, lambda job_id: self.live_usage.of(job_id).get(None) or {},
                                 lambda job: self.session_secret(job) if self.job_credential else "",
                                 self._stop_idle_session, self.clock)
        self._session_idle_task = asyncio.create_task(watch.run(), name="corral-session-idle")

    async def stop(self) -> None:
        async with self._lock:  # a stimulus being committed finishes first
            self._stopping = True
            for task in (self._task, self._stall_task, self._recovery, self._lease_task, self._forecast_task,
                         self._session_idle_task):
                if task is not None:
                    task.cancel()
                    try:
                        await task
                    except asyncio.CancelledError:
                        pass
            if self.writer.outage is None and self._engine is not None and self.lease_proven():
                try:
                    await self._commit(self._engine.handle(now=self.clock()))
                except (StoreUnavailable, NotLeader) as exc:
                    log.error("last commit before stopping failed: %s", exc)
        self.forecasts.close()
        if self.leadership is not None:
            await self.leadership.stop()
        self.writer.close()

    async def _stop_idle_session(self, job_id: int, verdict: str) -> None:
        """A session found idle (session_idle.py): cancelled, the verdict in its history and its log."""
        def change(now: float) -> Result:
            job = self.engine.jobs.get(job_id)  # under the lock: it may have ended meanwhile
            if job is None or job.state is not JobState.RUNNING:
                return Result()
            return self.engine.handle(ev.CancelRequested(job_id, None, reason=verdict,
                                                         note=f"this session is stopped: {verdict}"), now=now)

        await self._stimulus(change)

    # ----- the scheduling loop

    async def _loop(self) -> None:
        pacer = CyclePacer.live(self.config.min_cycle_interval_s)
        wake = self._wake
        assert wake is not None, "start() makes the wake-up event before it starts the loop"
        while True:
            now = self.clock()
            # While the store fails, only the recovery wakes the loop (an overdue deadline would spin it).
            engine = self._engine
            idle = self.writer.outage is not None or engine is None
            timer = pacer.sleep(now, None if idle or engine is None else engine.next_deadline(now))
            await _wait(wake, None if timer is None else timer - now)
            wake.clear()
            wanted, self._cycle_wanted = self._cycle_wanted, False
            if self.writer.outage is not None or self._engine is None:
                continue
            if not wanted and (timer is None or self.clock() < timer):
                continue  # rearm(): only the deadline moved; sleep again with the timer it sets now
            # Whenever the controller stopped listening (in a wait, a cycle or a handler), before the cycle
            # that would count that time as the agents' silence.
            self._discount_stall(self._stalls.take())
            started = time.perf_counter()
            try:
                await self.run_cycle()
            except (StoreUnavailable, NotLeader):
                pass  # logged where the commit failed; the recovery or a takeover pokes the loop
            except Exception:  # a failed cycle must not stop scheduling for good
                log.exception("scheduling cycle failed")
                await asyncio.sleep(1.0)
            ended = time.perf_counter()
            self.cycle_s += ended - started
            pacer.cycle_ran(started, ended)
            # Requests have their turn before the next cycle: submissions and agent reports are answered
            # between back-to-back cycles, and folded into the next one together.
            await asyncio.sleep(max(0.0, pacer.next_cycle(ended) - ended))

    def _discount_stall(self, stall_s: float) -> None:
        if stall_s > 0:
            log.warning("the controller could not listen for %.1f s: not counted as any node's silence", stall_s)
            if self._engine is not None:
                self._engine.handle(ev.ListenerStalled(stall_s), now=self.clock())  # changes nothing stored

    async def run_cycle(self) -> None:
        before = self.engine.last_plan
        started = time.perf_counter()
        await self._handle(ev.TimePassed(), ev.CycleDue(), wake=False)
        self.cycles += 1
        engine = self._engine
        if engine is not None:  # a cycle that ran no schedule (the cluster is stopping) leaves the plan as it was
            plan = engine.last_plan if engine.last_plan is not before else None
            self.metrics.cycle_ran(time.perf_counter() - started, plan, engine)
            self.record_utilisation()

    def record_utilisation(self) -> None:
        """Allocated and total GPUs of the nodes that are up, now (the dashboard's utilisation plot)."""
        engine = self.engine
        up = [node for node in engine.nodes.values() if node.up]
        allocated = sum(len(engine.active.usage.of(node.name)[0]) for node in up)
        self.utilisation.record(self.clock(), allocated, sum(len(node.gpus) for node in up))


    def recent_ended_jobs(self) -> list[Job]:
        """The ended jobs among the newest WARM_JOBS (what forecasts learn runtimes from at start)."""
        return self.store.query_jobs(include_active=False, after_id=max(0, self.store.max_job_id() - WARM_JOBS))



async def _wait(event: asyncio.Event, timeout_s: float | None) -> None:
    """Until `event` is set or `timeout_s` (None: no limit) has passed."""
    try:
        await asyncio.wait_for(event.wait(), timeout=None if timeout_s is None else max(0.0, timeout_s))
    except TimeoutError:
        pass
