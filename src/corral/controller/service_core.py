"""The controller's shell around the engine: every stimulus is folded in, the changes are committed to the
store before anyone is answered, and the resulting commands go to the agents' outboxes.

The store is the truth (docs/architecture.md, "The state-store contract"). One asyncio event loop owns the
engine; one stimulus at a time holds the writer lock from folding it in to dispatching its commands, and
a commit that would wait runs in the store's writer thread, so reads and health checks are answered
meanwhile (writer.py). When a commit fails, the engine is thrown away and rebuilt from the store as a
restarted controller would build it, the epoch changes so that every agent registers again and is
reconciled, and the caller gets StoreUnavailable (HTTP 503): nothing changed. Until a write succeeds
again, stimuli are refused at once and no cycle runs. The loop sleeps until something changed (a submission,
an agent report, a cancel) or the engine's next deadline (a time limit, a kill to escalate, a node to declare
lost) comes due.

Controllers sharing a database take turns leading (leadership.py): only the leader holds an engine; it builds
it from the store when it takes the lease (as a restart does) and drops it when it stops leading. A
standby refuses every request with NotLeader; a leader that can no longer prove its lease dispatches nothing.
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from corral.controller import views
from corral.controller.agent_events import replica_launch
from corral.controller.forecasts import Forecasts
from corral.controller.leadership import Leadership, NotLeader
from corral.controller.metrics import ControllerMetrics
from corral.controller.metrics_collector import EngineCollector
from corral.controller.outbox import Outbox
from corral.controller.stall import StallWatch
from corral.controller.step_views import step_launch_message
from corral.controller.telemetry import JobSeries, UtilisationHistory
from corral.controller.usage_views import LiveUsage
from corral.controller.writer import Outage, StoreUnavailable, StoreWriter
from corral.engine import events as ev
from corral.engine.commands import Command, Launch, LaunchStep
from corral.engine.config import EngineConfig
from corral.engine.engine import Engine
from corral.engine.records import Job, Service
from corral.engine.result import Result
from corral.protocol import (
    JOB_CREDENTIAL_ENV,
    SignalJob,
)
from corral.store import Store, StoreError
from corral.store.lease import LeaseLost

SESSION_SECRET_ENV = "CORRAL_SESSION_SECRET"  # a session's upstream token (session_secret)
log = logging.getLogger("corral.controller")


class StaleAgent(Exception):
    """The agent must register again (the controller restarted, or the node was declared lost)."""


class ServiceCore:
    """The controller's state around its engine: leadership, the state-store contract and dispatch.

    The controller service is built in layers, each a class over the one before: this core, then the
    scheduling loop and lifecycle (scheduling_loop.py), then the agents' side (agent_link.py), then the
    users' requests and queries (service.py: ControllerService)."""

    def __init__(self, engine: Engine | None, store: Store, clock: Callable[[], float] = time.time,
                 heartbeat_s: float = 5.0, *, restore: Callable[[float], Engine] | None = None,
                 leadership: Leadership | None = None, config: EngineConfig | None = None,
                 fence_after_s: float | None = None, after_install: Callable[[], None] | None = None) -> None:
        """`restore(now)` builds the engine from the store, as at start (the default: restore_engine with
        this engine's configuration, profile and tenancy, which the store's own tenancy overrides).
        `fence_after_s`: what agents are told for self-fencing (RegistrationReply; fencing_after_s).
        With `leadership`, the service has no engine (None, and `restore` and `config` given) until it
        takes the lease; without, it always leads.
        `after_install()` runs once an engine is built: for the one given here, and for each one a takeover or
        a recovery builds (the live controller settles Python's collector there: corral/collector.py)."""
        self._engine = engine
        self._after_install = after_install
        resolved = engine.config if engine is not None else config
        assert resolved is not None, "a service without an engine needs its configuration"
        self.config: EngineConfig = resolved
        self.leadership = leadership
        self.store = store
        self.clock = clock
        self.heartbeat_s = heartbeat_s
        self.fence_after_s = fence_after_s
        self.outbox = Outbox()
        self.epoch = secrets.token_hex(8)
        self.live_usage = LiveUsage()
        self.utilisation = UtilisationHistory()  # the dashboard's plots (controller/telemetry.py)
        self.job_series = JobSeries()
        self.cycles = 0
        self.cycle_s = 0.0  # seconds the loop's cycles took, in all (GET /health shows it with `cycles`)
        # /metrics: the shell's counters (controller/metrics.py), and the gauges read from the engine at
        # scrape time (controller/metrics_collector.py; none while this controller has no engine).
        self.metrics = ControllerMetrics()
        self.metrics.registry.register(EngineCollector(lambda: self._engine, self.metrics, self.live_usage))
        self.writer = StoreWriter(store)
        if restore is None:
            assert engine is not None, "a service without an engine needs its restore function"
            from corral.controller.restore import restore_engine
            restore = functools.partial(restore_engine, engine.config, engine.profile, store,
                                        file_tenancy=engine.tenancy.spec)
        self._restore = restore
        self._lock = asyncio.Lock()  # held by one group of stimuli from folding them in to dispatching
        self._queued: list[_Queued] = []  # stimuli waiting for the next group commit (_stimulus)
        self._flusher: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._cycle_wanted = False  # set by poke(), taken by the loop: a wake-up that wants a cycle
        self._task: asyncio.Task | None = None
        self._stalls = StallWatch()
        self._recovery: asyncio.Task | None = None
        self._stopping = False
        # Set by create_app: the credential a job's tasks get (CORRAL_TOKEN) to reach the controller as the
        # job's user while the job is active; None: tasks get none.
        self.job_credential: Callable[[Job], str] | None = None
        self._lease_task: asyncio.Task | None = None
        self.forecasts = Forecasts()
        self._forecast_task: asyncio.Task | None = None
        self._session_idle_task: asyncio.Task | None = None
        self._created_at: float | None = None
        self._stall_task: asyncio.Task | None = None
        if engine is not None and after_install is not None:
            after_install()
        if leadership is not None:
            leadership.on_lead = self._take_over
            leadership.on_lose = self._step_down

    @property
    def engine(self) -> Engine:
        """The engine, while this controller leads; otherwise the refusal (NotLeader, or 503 while it
        rebuilds the engine after taking the lease)."""
        if self._engine is None:
            raise self.refusal() or NotLeader(None)
        return self._engine

    @engine.setter
    def engine(self, engine: Engine) -> None:
        self._engine = engine

    # ----- leadership

    def lease_proven(self) -> bool:
        return self.leadership is None or self.leadership.proven()

    @property
    def leader_epoch(self) -> int:
        """The lease epoch agents see with every reply (0 without leadership): they refuse lower ones."""
        return 0 if self.leadership is None else self.leadership.epoch

    def refusal(self) -> Exception | None:
        """Why this controller cannot take requests now (NotLeader, StoreUnavailable), or None."""
        leadership = self.leadership
        if leadership is not None and not leadership.leading and leadership.problem is None:
            return NotLeader(leadership.leader_url)
        problem = self.health()
        return None if problem is None else StoreUnavailable(f"{problem}; nothing was changed, try again later")

    async def _take_over(self, term: int) -> None:
        """The lease is this controller's: build the engine from the store, as a restarted controller does
        (agents get one node timeout to register again), then schedule."""
        assert self.leadership is not None
        try:
            async with self._lock:
                engine = await self.writer.call(self._restore, self.clock())
                if not self.leadership.holds(term):
                    return
                self._install(engine)
                self.writer.outage = None
        except StoreError as exc:
            self.leadership.step_down(f"cannot rebuild the engine from the store: {exc}")
            return
        log.info("leading at epoch %d: engine rebuilt from the store", self.leadership.epoch)
        self.poke()

    def _step_down(self, reason: str) -> None:
        """No longer the leader (the store is fenced already): drop the engine and everything queued for
        the agents; stop any recovery."""
        self._engine = None
        self._new_epoch()
        if self._recovery is not None:
            self._recovery.cancel()
            self._recovery = None
        self.writer.outage = None
        self.poke()

    def poke(self) -> None:
        """Something changed that the scheduler looks at: the loop runs a cycle, as soon as its pacer lets it."""
        self._cycle_wanted = True
        if self._wake is not None:
            self._wake.set()

    def rearm(self) -> None:
        """Only the engine's next deadline may have moved (a job submitted that waits its start delay): the
        loop sets its timer to it, and runs no cycle before that rings or something else changes."""
        if self._wake is not None:
            self._wake.set()


    # ----- the state-store contract

    async def _handle(self, *events: ev.Event, wake: bool = True) -> Result:
        """Hand `events` to the engine, commit what changed, then dispatch its commands (see _stimulus)."""
        return await self._stimulus(lambda now: self.engine.handle(*events, now=now), wake=wake)

    async def _stimulus(self, change: Callable[[float], Result], wake: bool = True, dispatch: bool = True) -> Result:
        """Fold one stimulus into the engine (`change(now)` hands it over and returns the engine's Result),
        commit it, then dispatch the commands (unless the caller does so later); return once it is committed.
        Or, when the store cannot be written, change nothing and raise StoreUnavailable. An exception `change`
        raises before it touches the engine (a refusal) passes.

        Group commit: stimuli that arrive while the event loop is busy (a burst of submissions, agents'
        reports) are folded in one after another and committed in one transaction; each caller is answered
        only after that commit, so nothing is acknowledged that a crash could lose, and a failed commit
        fails every stimulus of the group (the engine is rebuilt from the store, as for one)."""
        self._refuse_while_down()
        queued = _Queued(change, dispatch, asyncio.get_running_loop().create_future())
        self._queued.append(queued)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._commit_queued(), name="corral-group-commit")
        result = await queued.outcome
        if wake:
            self.poke()
        return result

    async def _commit_queued(self) -> None:
        """Commit what is queued now, as one group, under the lock; what arrives meanwhile is the next group,
        in a task of its own, so that a cycle waiting for the lock gets it in between."""
        try:
            async with self._lock:
                group, self._queued = self._queued, []
                await self._commit_group(group)
        finally:
            self._flusher = None
            if self._queued:
                self._flusher = asyncio.create_task(self._commit_queued(), name="corral-group-commit")

    async def _commit_group(self, group: list[_Queued]) -> None:
        try:
            self._refuse_while_down()
        except Exception as exc:
            for queued in group:
                queued.fail(exc)
            return
        now = self.clock()
        folded = self._fold(group, now)
        if not folded:
            return
        group_result = merged([result for _, result in folded])
        try:
            await self._commit(group_result)
        except BaseException as exc:
            for queued, _ in folded:
                queued.fail(exc)
            if not isinstance(exc, Exception):
                raise
            return
        # Once per group: a job two stimuli of the group changed has its entries at `now` counted once.
        self.metrics.committed(group_result, now)
        for queued, result in folded:
            if queued.dispatch:
                self._dispatch(result.commands)  # nothing, unless the lease is still proven
            if not queued.outcome.done():
                queued.outcome.set_result(result)

    @staticmethod
    def _fold(group: list[_Queued], now: float) -> list[tuple[_Queued, Result]]:
        """Hand each stimulus of `group` to the engine, in order; those it took, with their Results. One
        refused (raising before it touched the engine) is answered with that at once."""
        folded: list[tuple[_Queued, Result]] = []
        for queued in group:
            if queued.outcome.done():  # its caller went away before it was handed over: it never happened
                continue
            try:
                folded.append((queued, queued.change(now)))
            except Exception as exc:
                queued.fail(exc)
        return folded

    def _refuse_while_down(self) -> None:
        refusal = self.refusal()
        if refusal is None and not self.lease_proven():
            refusal = NotLeader(None)  # its lease is about to lapse: the watchdog steps it down
        if refusal is not None:
            raise refusal

    async def _commit(self, result: Result) -> None:
        """Write the records and metadata `result` says changed: the one place the engine's changes are
        applied to the store."""
        engine = self.engine
        try:
            meta = {key: json.dumps(meta_value(engine, key)) for key in result.meta}
            # Encoded here, on the loop, so that the rows are one consistent picture of the engine.
            await self.writer.write(self.store.encode(result.jobs, result.nodes, meta, result.services,
                                                      result.services_forgotten))
            self.forecasts.learn(result.jobs)
        except LeaseLost as exc:  # another controller leads: this one wrote nothing and must stop
            if self.leadership is not None:
                self.leadership.step_down(str(exc), exc.leader_url)
            raise NotLeader(exc.leader_url) from exc
        except BaseException as exc:  # any failure, even a cancelled wait for the write
            outage = self.writer.failed(exc, self.clock())
            log.error("commit failed; rebuilding the engine from the store (%s)", outage.reason,
                      exc_info=not isinstance(exc, StoreError | asyncio.CancelledError))
            self._discard_engine()
            if isinstance(exc, Exception):
                raise _unavailable(outage) from exc
            raise

    def _discard_engine(self) -> None:
        """The engine holds effects the store lacks: stop using it. Agents must register again (new
        epoch); commands still queued for them were decided by it."""
        self._new_epoch()
        if self._recovery is None and not self._stopping:
            self._recovery = asyncio.create_task(self._recover(), name="corral-store-recovery")

    async def _recover(self) -> None:
        """Rebuild the engine from the store (so that reads show what is committed), check with backoff
        until a write works, then rebuild once more, as a controller restarted now would, and resume."""
        rebuilt = False
        while True:
            await asyncio.sleep(self.writer.retry_delay_s())
            try:
                if not rebuilt:
                    self._install(await self.writer.call(self._restore, self.clock()))
                    rebuilt = True
                await self.writer.call(self.store.check_writable, self.clock())
                async with self._lock:
                    self._install(await self.writer.call(self._restore, self.clock()))
                    outage = self.writer.outage
                    # Set by the failed commit that started this recovery; only the recovery clears it here
                    # (a takeover clears it too, but stepping down first cancelled the recovery).
                    assert outage is not None
                    since = outage.since
                    self.writer.outage, self._recovery = None, None
                break
            except Exception as exc:
                reason = self.writer.failed(exc, self.clock()).reason
                log.warning("the store still fails (%s); next check in %.1f s", reason, self.writer.retry_delay_s())
        log.info("the store works again after %.1f s; engine rebuilt from it", self.clock() - since)
        self.poke()

    def _install(self, engine: Engine) -> None:
        # A cluster being stopped stays stopped: the rebuilt engine starts nothing either.
        if self._engine is not None:
            engine.stopping = self._engine.stopping
        self._engine = engine
        self._new_epoch()
        if self._after_install is not None:
            self._after_install()

    def _new_epoch(self) -> None:
        """Every agent must register again, and nothing queued for the agents before is sent."""
        self.epoch = secrets.token_hex(8)
        self.outbox = Outbox()

    def created_at(self) -> float | None:
        """When the cluster began (Store.created_at), read once; None while the database cannot say. Reports
        that span a period (corral advise, sreport) count no time before it."""
        if self._created_at is None:
            try:
                self._created_at = self.store.created_at()
            except StoreError:
                return None
        return self._created_at

    def health(self) -> str | None:
        """Why the controller cannot take changes now, or None when it can (a standby that reaches the
        database can: it is healthy, and sends every change to the leader)."""
        leadership = self.leadership
        if leadership is not None and not leadership.leading:
            # A standby that fails to reach the lease cannot even tell who leads.
            return None if leadership.problem is None else f"store: cannot reach the database: {leadership.problem}"
        if self._engine is None:
            return "taking over as the leader: rebuilding the engine from the store"
        outage = self.writer.outage
        return None if outage is None else outage.describe()

    @property
    def ready(self) -> bool:
        """Whether this controller has an engine: it leads (or takes part in no leadership)."""
        return self._engine is not None

    @property
    def role(self) -> str:
        return "leader" if self.leadership is None or self.leadership.leading else "standby"

    async def status(self) -> dict:
        """Who leads: this controller's role, epoch, pid and URL, the leader's URL, every controller."""
        if self.leadership is None:
            return {"role": "leader", "epoch": 0, "pid": os.getpid(), "url": None, "leader": None,
                    "controllers": []}
        return await self.leadership.status()

    def _dispatch(self, commands: list[Command]) -> None:
        if commands and not self.lease_proven():
            # Committed, but the lease can no longer be proven: the next leader sends what the store says.
            log.warning("lease not proven: %d command(s) not sent", len(commands))
            return
        for cmd in commands:
            if isinstance(cmd, Launch):
                job = self.engine.jobs.get(cmd.job_id)
                if job is None:
                    continue
                msg = views.launch_message(job, cmd.node, self.engine.nodes, self.engine.config.cluster_name)
                if job.spec.service:
                    msg = replica_launch(msg, self.engine.services[job.spec.service].spec)
                self._add_job_credential(job, msg.env)
                self.outbox.put(cmd.node, msg)
            elif isinstance(cmd, LaunchStep):
                job = self.engine.jobs.get(cmd.job_id)
                if job is None or not job.steps[cmd.step_id].live:
                    continue
                step = job.steps[cmd.step_id]
                step_msg = step_launch_message(job, step, cmd.node, self.engine.nodes,
                                               self.engine.config.cluster_name)
                self._add_job_credential(job, step_msg.env)
                self.outbox.put(cmd.node, step_msg)
            else:
                self.outbox.put(cmd.node, SignalJob(job_id=cmd.job_id, signal=int(cmd.signal), grace_s=cmd.grace_s,
                                                    target=cmd.target, step_id=cmd.step_id, reason=cmd.reason,
                                                    drain_s=cmd.drain_s, note=cmd.note))

    def _add_job_credential(self, job: Job, env: dict[str, str]) -> None:
        """The job's own credential replaces any the submitter's exported environment carried (an admin's
        cluster secret, a user's long-lived token): a job's tasks hold no more than their job's power."""
        for name in ("CORRAL_SECRET", "CORRAL_SECRET_FILE"):
            env.pop(name, None)
        if self.job_credential is not None:
            env[JOB_CREDENTIAL_ENV] = self.job_credential(job)
            if job.spec.session:
                env[SESSION_SECRET_ENV] = self.session_secret(job)

    def session_secret(self, job: Job) -> str:
        """What a session's application (JupyterLab) takes as its own token, and the gateway sends it: derived
        from the job's credential, so only the controller can make it, and the same after a restart. The
        application then refuses whoever reaches its port on the node without the gateway."""
        assert self.job_credential is not None
        return hashlib.sha256(f"corral-session-upstream:{self.job_credential(job)}".encode()).hexdigest()


@dataclass(slots=True)
class _Queued:
    """A stimulus waiting for its group's commit, and its caller's outcome."""
    change: Callable[[float], Result]
    dispatch: bool
    outcome: asyncio.Future[Result]

    def fail(self, exc: BaseException) -> None:
        if self.outcome.done():
            return
        if isinstance(exc, asyncio.CancelledError):
            self.outcome.cancel()
        else:
            self.outcome.set_exception(exc)


def merged(results: list[Result]) -> Result:
    """What a group of Results changed, to be committed in one transaction: every record each changed, once
    (the last given: they are encoded after the whole group was folded in), and a service
    deleted then made again (or the reverse) as the last of them left it."""
    if len(results) == 1:
        return results[0]
    services: dict[str, Service] = {}
    forgotten: set[str] = set()
    for result in results:
        for service in result.services:
            services[service.name] = service
            forgotten.discard(service.name)
        for name in result.services_forgotten:
            forgotten.add(name)
            services.pop(name, None)
    return Result(jobs=list({job.id: job for result in results for job in result.jobs}.values()),
                  nodes=list({node.name: node for result in results for node in result.nodes}.values()),
                  meta=frozenset().union(*(result.meta for result in results)),
                  services=list(services.values()), services_forgotten=sorted(forgotten))


def _unavailable(outage: Outage) -> StoreUnavailable:
    return StoreUnavailable(f"{outage.describe()}; nothing was changed, try again later")


def meta_value(engine: Engine, key: str):
    """What the store keeps under a cluster_meta key, as JSON-able data."""
    if key == "tenancy":
        return engine.tenancy.spec.model_dump()
    if key == "fairshare":
        return engine.fairshare.state()
    if key == "reservations":
        return engine.reservations.to_json()
    raise KeyError(key)
