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
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from corral.api.schemas import JobOut, JobSubmit, NodeOut, PartitionOut
from corral.controller import views
from corral.controller.agent_events import engine_event, replica_launch
from corral.controller.forecasts import WARM_JOBS, Forecasts
from corral.controller.leadership import Leadership, NotLeader
from corral.controller.metrics import ControllerMetrics
from corral.controller.metrics_collector import EngineCollector
from corral.controller.outbox import Outbox
from corral.controller.stall import StallWatch
from corral.controller.step_views import step_launch_message
from corral.controller.telemetry import JobSeries, UtilisationHistory
from corral.controller.usage_views import GPU_IDLE, LiveUsage, combine, gpu_idle_flagged
from corral.controller.writer import Outage, StoreUnavailable, StoreWriter
from corral.core.model import Gpu
from corral.engine import events as ev
from corral.engine.commands import Command, Launch, LaunchStep
from corral.engine.config import EngineConfig
from corral.engine.engine import Engine
from corral.engine.job_refs import UnknownRef, named_job_ids
from corral.engine.membership import Inventory
from corral.engine.pacer import CyclePacer
from corral.engine.records import Job, JobState
from corral.engine.result import Result
from corral.engine.snapshot import node_usage
from corral.jobref import JobRef
from corral.protocol import (
    JOB_CREDENTIAL_ENV,
    EventBatch,
    LaunchJob,
    NodeStarted,
    Registration,
    RegistrationReply,
    SignalJob,
    UsageReport,
)
from corral.store import Store, StoreError
from corral.store.lease import LeaseLost

SESSION_SECRET_ENV = "CORRAL_SESSION_SECRET"  # a session's upstream token (session_secret)
log = logging.getLogger("corral.controller")

R = TypeVar("R")


class StaleAgent(Exception):
    """The agent must register again (the controller restarted, or the node was declared lost)."""


class ControllerService:
    def __init__(self, engine: Engine | None, store: Store, clock: Callable[[], float] = time.time,
                 heartbeat_s: float = 5.0, *, restore: Callable[[float], Engine] | None = None,
                 leadership: Leadership | None = None, config: EngineConfig | None = None,
                 fence_after_s: float | None = None) -> None:
        """`restore(now)` builds the engine from the store, as at start (the default: restore_engine with
        this engine's configuration, profile and tenancy, which the store's own tenancy overrides).
        `fence_after_s`: what agents are told for self-fencing (RegistrationReply; fencing_after_s).
        With `leadership`, the service has no engine (None, and `restore` and `config` given) until it
        takes the lease; without, it always leads."""
        self._engine = engine
        self.config = engine.config if engine is not None else config
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
        self._lock = asyncio.Lock()  # held by one stimulus from folding it in to dispatching its commands
        self._wake: asyncio.Event | None = None
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
        self._created_at: float | None = None
        self._stall_task: asyncio.Task | None = None
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

    async def stop(self) -> None:
        async with self._lock:  # a stimulus being committed finishes first
            self._stopping = True
            for task in (self._task, self._stall_task, self._recovery, self._lease_task, self._forecast_task):
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
        if self._wake is not None:
            self._wake.set()

    async def _loop(self) -> None:
        pacer = CyclePacer.live()
        while True:
            now = self.clock()
            # While the store fails, only the recovery wakes the loop (an overdue deadline would spin it).
            engine = self._engine
            idle = self.writer.outage is not None or engine is None
            timer = pacer.sleep(now, None if idle else engine.next_deadline(now))
            await _wait(self._wake, None if timer is None else timer - now)
            self._wake.clear()
            if self.writer.outage is not None or self._engine is None:
                continue
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

    # ----- the state-store contract

    async def _handle(self, *events: ev.Event, wake: bool = True) -> Result:
        """Hand `events` to the engine, commit what changed, then dispatch its commands (see _stimulus)."""
        return await self._stimulus(lambda now: self.engine.handle(*events, now=now), wake=wake)

    async def _stimulus(self, change: Callable[[float], Result], wake: bool = True, dispatch: bool = True) -> Result:
        """Fold one stimulus into the engine (`change(now)` hands it over and returns the engine's Result),
        commit it, then dispatch the commands (unless the caller does so later). Or, when the store cannot
        be written, change nothing and raise StoreUnavailable. An exception `change` raises before it
        touches the engine (a refusal) passes."""
        self._refuse_while_down()
        async with self._lock:
            self._refuse_while_down()
            now = self.clock()
            result = change(now)
            await self._commit(result)
            self.metrics.committed(result, now)
            if dispatch:
                self._dispatch(result.commands)  # nothing, unless the lease is still proven
        if wake:
            self.poke()
        return result

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
                    since = self.writer.outage.since
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
                msg = step_launch_message(job, step, cmd.node, self.engine.nodes, self.engine.config.cluster_name)
                self._add_job_credential(job, msg.env)
                self.outbox.put(cmd.node, msg)
            else:
                self.outbox.put(cmd.node, SignalJob(job_id=cmd.job_id, signal=int(cmd.signal), grace_s=cmd.grace_s,
                                                    target=cmd.target, step_id=cmd.step_id, reason=cmd.reason,
                                                    drain_s=cmd.drain_s))

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

    # ----- users

    async def submit(self, sub: JobSubmit) -> tuple[int, list[int]]:
        # Durable before the user hears the id.
        return (await self._stimulus(functools.partial(self._submit, sub))).reply

    def _submit(self, sub: JobSubmit, now: float) -> Result:
        return self.engine.handle(ev.SubmissionRequested(sub), now=now)

    async def cancel(self, job_id: int, uid: int | None = None) -> JobOut:
        return await self._job_operation(job_id, ev.CancelRequested(job_id, uid))

    async def signal(self, job_id: int, signum: int, scope: str, uid: int | None) -> JobOut:
        return await self._job_operation(job_id, ev.SignalRequested(job_id, signum, scope, uid))

    async def requeue(self, job_id: int) -> tuple[JobOut, Callable[[], None]]:
        """Requeue, and a function that sends the kills: the caller runs it once the reply is out, since
        `scontrol requeue` is usually run by the job itself (submitit, Lightning), whose processes the
        kill would otherwise reach before scontrol has heard that its request succeeded."""
        result = await self._stimulus(lambda now: self.engine.handle(ev.RequeueRequested(job_id), now=now),
                                      wake=False, dispatch=False)
        out = views.job_out(self.find_job(job_id), self.clock(),
                            gpu_idle_flag_s=self.engine.config.gpu_idle_flag_s)

        def send() -> None:
            self._dispatch(result.commands)
            self.poke()

        return out, send

    async def request(self, event: ev.Event):
        """Hand the engine one request (committed, then its commands dispatched); its reply."""
        return (await self._handle(event)).reply

    async def update(self, job_id: int, changes) -> JobOut:
        return await self._job_operation(job_id, ev.UpdateRequested(job_id, **changes.model_dump(exclude_none=True)))

    async def hold(self, job_id: int, held: bool) -> JobOut:
        return await self._job_operation(job_id, ev.HoldRequested(job_id, held))

    async def _job_operation(self, job_id: int, event: ev.Event) -> JobOut:
        await self._handle(event)
        # Read after the commit: a job that ended (a pending one cancelled) is back from the store.
        return views.job_out(self.find_job(job_id), self.clock(),
                             gpu_idle_flag_s=self.engine.config.gpu_idle_flag_s)

    def recent_ended_jobs(self) -> list[Job]:
        """The ended jobs among the newest WARM_JOBS (what forecasts learn runtimes from at start)."""
        return self.store.query_jobs(include_active=False, after_id=max(0, self.store.max_job_id() - WARM_JOBS))

    def find_job(self, job_id: int) -> Job | None:
        return self.engine.jobs.get(job_id) or self.store.get_job(job_id)

    def job(self, job_id: int) -> JobOut | None:
        job = self.find_job(job_id)
        if job is None:
            return None
        out = views.job_out(job, self.clock(), None if job.state.terminal else self.live_usage.of(job_id),
                            self.forecasts.starts.get(job_id), gpu_idle_flag_s=self.engine.config.gpu_idle_flag_s)
        view = self.engine.views.pending.get(job_id)
        if view is not None:
            out.position = 1 + sum(1 for other in self.engine.views.pending.values() if other.order < view.order)
            out.priority = view.priority
        return out

    def job_ids(self, refs: Iterable[JobRef]) -> list[int]:
        """The raw ids the references name (corral.engine.job_refs); those naming no job add none."""
        found: set[int] = set()
        for ref in refs:
            try:
                found.update(named_job_ids(ref, self.find_job))
            except UnknownRef:
                continue
        return sorted(found)

    def nodes(self) -> list[NodeOut]:
        usage = node_usage(self.engine.active, self.engine.nodes)
        owners: dict[str, dict[int, int]] = {}
        for job in self.engine.jobs.values():
            for s in job.slices:
                owners.setdefault(s.node, {}).update({g: job.id for g in s.gpus})
        return [views.node_out(n, usage.get(n.name, (set(), 0, 0)), owners.get(n.name, {}))
                for n in sorted(self.engine.nodes.values(), key=lambda n: n.name)]

    def record_utilisation(self) -> None:
        """Allocated and total GPUs of the nodes that are up, now (the dashboard's utilisation plot)."""
        engine = self.engine
        up = [node for node in engine.nodes.values() if node.up]
        allocated = sum(len(engine.active.usage.of(node.name)[0]) for node in up)
        self.utilisation.record(self.clock(), allocated, sum(len(node.gpus) for node in up))

    def partitions(self) -> list[PartitionOut]:
        return views.partition_outs(self.engine.config, list(self.engine.nodes.values()))

    async def accrue_usage(self) -> None:
        """Charge running jobs' fair-share usage up to now, and store it. While the store cannot be
        written, reads show what is committed (as every read does then): nothing is charged."""
        if self.writer.outage is None:
            try:
                await self._handle(ev.UsageAccrualDue(), wake=False)
            except (StoreUnavailable, NotLeader):
                pass

    async def set_tenancy(self, spec) -> None:
        await self._handle(ev.TenancyChanged(spec))

    async def add_reservation(self, spec):
        return await self.request(ev.ReservationAdded(spec))

    async def remove_reservation(self, name: str) -> None:
        await self._handle(ev.ReservationRemoved(name))

    async def drain(self, node: str, drain: bool, reason: str) -> None:
        await self._handle(ev.DrainRequested(node, drain, reason))

    # ----- agents

    async def register(self, reg: Registration) -> RegistrationReply:
        inventory = Inventory(
            gpus=tuple(Gpu(g.index, g.model, g.memory_mib, g.domain) for g in reg.gpus),
            cpus=reg.cpus, mem_mib=reg.mem_mib, address=reg.address, run_as_user=reg.run_as_user,
            agent_user=reg.agent_user, cgroups=reg.cgroups, features=frozenset(reg.features))

        def change(now: float) -> Result:
            self.outbox.ack(reg.node, 1 << 62)  # reconciliation below decides what still needs sending
            return self.engine.handle(ev.NodeRegistered(reg.node, inventory, frozenset(reg.running_jobs),
                                                        frozenset(reg.finished_jobs)), now=now)

        kill = (await self._stimulus(change)).reply
        log.info("node %s registered (%d GPUs)", reg.node, len(reg.gpus))
        return RegistrationReply(epoch=self.epoch, heartbeat_s=self.heartbeat_s, kill_jobs=kill,
                                 leader_epoch=self.leader_epoch, fence_after_s=self.fence_after_s)

    def check_agent(self, node: str, epoch: str | None) -> None:
        # A contact changes nothing stored (a restarted controller gives every node a full timeout).
        if epoch != self.epoch or not self.engine.handle(ev.NodeContacted(node), now=self.clock()).reply:
            raise StaleAgent(node)

    async def agent_events(self, node: str, epoch: str | None, batch: EventBatch) -> None:
        """Fold an agent's events in. Refused (StoreUnavailable, StaleAgent) means not taken: the agent
        keeps them and sends them again. Usage samples only go to `live_usage` (see LiveUsage)."""
        folded = [event for event in batch.events if not isinstance(event, UsageReport)]

        def change(now: float) -> Result:
            self.check_agent(node, epoch)  # under the lock: the engine may have been rebuilt meanwhile
            return self.engine.handle(*(engine_event(node, event) for event in folded), now=now)

        if folded:
            # A task that started changes nothing the scheduler looks at: no cycle for it (the simulator's
            # driver does not run one either, and a cycle would only find the same plan).
            await self._stimulus(change, wake=any(not isinstance(event, NodeStarted) for event in folded))
        else:
            self.check_agent(node, epoch)
        self.live_usage.take(node, batch.events, self.engine.jobs)
        reported = sorted({e.job_id for e in batch.events if isinstance(e, UsageReport) and e.step_id is None})
        usages = {job_id: combine(self.live_usage.of(job_id).get(None) or {}) for job_id in reported}
        self.job_series.record(self.clock(), usages.items())
        await self._cancel_idle(usages)

    async def _cancel_idle(self, usages: Mapping[int, dict[str, Any] | None]) -> None:
        """The gpu_idle_cancel_s policy: cancel a running job whose GPUs every node saw idle that long
        (`usages`: the combined usage of the jobs just reported, by id)."""
        limit_s = self.engine.config.gpu_idle_cancel_s
        for job_id, usage in usages.items():
            if not gpu_idle_flagged(usage, limit_s):
                continue

            def change(now: float, job_id: int = job_id) -> Result:
                job = self.engine.jobs.get(job_id)  # under the lock: it may have ended meanwhile
                if job is None or job.state is not JobState.RUNNING:
                    return Result()
                return self.engine.handle(ev.CancelRequested(job_id, None, reason=GPU_IDLE), now=now)

            log.info("job %d: its GPUs idle for %.0fs (gpu_idle_cancel_s %g): cancelling it", job_id,
                     usage["gpu_idle_s"], limit_s)
            await self._stimulus(change)

    async def agent_commands(self, node: str, after: int, wait_s: float) -> list[LaunchJob | SignalJob]:
        outbox = self.outbox
        commands = await outbox.wait(node, after, wait_s)
        if outbox is not self.outbox or not self.lease_proven():
            # Decided by an engine that is gone (a failed commit, or this controller stopped leading).
            raise self.refusal() or StaleAgent(node)
        return commands


async def _wait(event: asyncio.Event, timeout_s: float | None) -> None:
    """Until `event` is set or `timeout_s` (None: no limit) has passed."""
    try:
        await asyncio.wait_for(event.wait(), timeout=None if timeout_s is None else max(0.0, timeout_s))
    except TimeoutError:
        pass


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
