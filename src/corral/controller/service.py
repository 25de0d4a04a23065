"""The controller's shell around the engine: every stimulus is folded in, the changes are committed to the
store before anyone is answered, and the resulting commands go to the agents' outboxes.

One asyncio event loop owns the engine, so no locks are needed: HTTP handlers and the scheduling loop take
turns. The loop sleeps until something changed (a submission, an agent report, a cancel) or the engine's
next deadline (a time limit, a kill to escalate, a node to declare lost) comes due: no busy polling.
"""
from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import replace

from corral.api.schemas import JobOut, JobSubmit, NodeOut, PartitionOut
from corral.controller import views
from corral.controller.outbox import Outbox
from corral.controller.stall import StallWatch
from corral.core.model import Gpu
from corral.controller.deps import resolve_dependency
from corral.engine.admission import AdmissionError, admit_full
from corral.controller.step_views import step_launch_message
from corral.engine.commands import Command, Launch, LaunchStep
from corral.engine.engine import Engine
from corral.engine.membership import Inventory
from corral.engine.records import Job
from corral.engine.snapshot import node_usage
from corral.protocol import (
    EventBatch,
    LaunchJob,
    NodeFinished,
    NodeStarted,
    Registration,
    RegistrationReply,
    SignalJob,
    StepFinished,
)
from corral.store import Store

log = logging.getLogger("corral.controller")


class StaleAgent(Exception):
    """The agent must register again (the controller restarted, or the node was declared lost)."""


class ControllerService:
    def __init__(self, engine: Engine, store: Store, clock: Callable[[], float] = time.time,
                 heartbeat_s: float = 5.0) -> None:
        self.engine = engine
        self.store = store
        self.clock = clock
        self.heartbeat_s = heartbeat_s
        self.outbox = Outbox()
        self.epoch = secrets.token_hex(8)
        self.cycles = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._stalls = StallWatch()

    # ----- lifecycle

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._loop(), name="corral-scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._commit()

    def poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _loop(self) -> None:
        while True:
            now = self.clock()
            deadline = self.engine.next_deadline(now)
            timeout = None if deadline is None else max(0.0, deadline - now)
            self._discount_stall(await self._stalls.wait(self._wake, timeout))
            self._wake.clear()
            started = time.perf_counter()
            try:
                self.run_cycle()
            except Exception:  # a failed cycle must not stop scheduling for good
                log.exception("scheduling cycle failed")
                await asyncio.sleep(1.0)
            # Give requests at least as long as the cycle took (a 100,000-job cycle takes ~0.5 s), so
            # that submissions and agent reports are answered between back-to-back cycles; they are
            # folded into the next cycle together.
            self._discount_stall(await self._stalls.sleep(min(time.perf_counter() - started, 1.0)))

    def _discount_stall(self, stall_s: float) -> None:
        if stall_s > 0:
            log.warning("the controller could not listen for %.1f s: not counted as any node's silence", stall_s)
            self.engine.discount_stall(stall_s, self.clock())

    def run_cycle(self) -> None:
        now = self.clock()
        commands = self.engine.tick(now)
        commands += self.engine.schedule(now)
        self.cycles += 1
        self._commit()
        self._dispatch(commands)

    def _commit(self) -> None:
        jobs, nodes = self.engine.take_dirty()
        if jobs or nodes:
            self.store.save(jobs, nodes)
        for key in sorted(self.engine.meta_dirty):
            self.store.set_meta(key, json.dumps(meta_value(self.engine, key)))
        self.engine.meta_dirty.clear()

    def _dispatch(self, commands: list[Command]) -> None:
        for cmd in commands:
            if isinstance(cmd, Launch):
                job = self.engine.jobs.get(cmd.job_id)
                if job is None:
                    continue
                msg = views.launch_message(job, cmd.node, self.engine.nodes, self.engine.config.cluster_name)
                self.outbox.put(cmd.node, msg)
            elif isinstance(cmd, LaunchStep):
                job = self.engine.jobs.get(cmd.job_id)
                if job is None or not job.steps[cmd.step_id].live:
                    continue
                step = job.steps[cmd.step_id]
                self.outbox.put(cmd.node, step_launch_message(job, step, cmd.node, self.engine.nodes,
                                                              self.engine.config.cluster_name))
            else:
                self.outbox.put(cmd.node, SignalJob(job_id=cmd.job_id, signal=int(cmd.signal), grace_s=cmd.grace_s,
                                                    target=cmd.target, step_id=cmd.step_id))

    # ----- users

    def submit(self, sub: JobSubmit) -> tuple[int, list[int]]:
        engine = self.engine
        admitted = admit_full(sub, engine.config, engine.nodes.values(), engine.tenancy)
        spec = admitted.spec
        self._check_submit_limit(spec, len(admitted.array_indices or [None]))
        if spec.reservation:
            self._check_reservation(spec)
        if spec.dependency:
            text, named = resolve_dependency(spec.dependency, self.find_job)
            for target in named:
                engine.remember(target)
            spec = replace(spec, dependency=text)
        now = self.clock()
        if admitted.array_indices is None:
            ids = [engine.submit(spec, now, held=sub.hold).id]
        else:
            base = engine.next_job_id
            ids = [engine.submit(replace(spec, array_job_id=base, array_task_id=index), now, held=sub.hold).id
                   for index in admitted.array_indices]
        self._commit()  # durable before the user hears the id
        self.poke()
        return ids[0], (ids if admitted.array_indices is not None else [])

    def _check_submit_limit(self, spec, new_jobs: int) -> None:
        tenancy = self.engine.tenancy
        for kind, name, limit in tenancy.submit_limits(spec.user, spec.account):
            if kind == "user":
                count = sum(1 for j in self.engine.jobs.values() if j.spec.user == name)
            else:
                count = sum(1 for j in self.engine.jobs.values() if name in tenancy.ancestors(j.spec.account))
            if count + new_jobs > limit:
                raise AdmissionError(f"job violates accounting/QOS policy (job submit limit): {kind} {name} has "
                                     f"{count} jobs, {new_jobs} more would pass its max_submit_jobs {limit}")

    def _check_reservation(self, spec) -> None:
        record = self.engine.reservations.by_name.get(spec.reservation)
        if record is None:
            raise AdmissionError(f"requested reservation is invalid: {spec.reservation!r}")
        if not record.allows(spec.user, spec.account):
            raise AdmissionError(f"access denied to reservation {spec.reservation!r} for {spec.user}/{spec.account}")

    def cancel(self, job_id: int, uid: int | None = None) -> JobOut:
        return self._job_operation(job_id, lambda now: self.engine.cancel(job_id, now, uid))

    def signal(self, job_id: int, signum: int, scope: str, uid: int | None) -> JobOut:
        return self._job_operation(job_id, lambda now: self.engine.signal(job_id, signum, scope, now, uid))

    def requeue(self, job_id: int) -> tuple[JobOut, Callable[[], None]]:
        """Requeue, and a function that sends the kills: the caller runs it once the reply is out, since
        `scontrol requeue` is usually run by the job itself (submitit, Lightning), whose processes the
        kill would otherwise reach before scontrol has heard that its request succeeded."""
        commands = self.engine.requeue(job_id, self.clock())
        self._commit()
        out = views.job_out(self.find_job(job_id), self.clock())

        def send() -> None:
            self._dispatch(commands)
            self.poke()

        return out, send

    def operate(self, operation) -> None:
        """Run an engine operation that returns commands; commit, then dispatch them."""
        commands = operation(self.clock())
        self._commit()
        self._dispatch(commands)
        self.poke()

    def update(self, job_id: int, changes) -> JobOut:
        fields = changes.model_dump(exclude_none=True)
        return self._job_operation(job_id, lambda now: (self.engine.update(job_id, now, **fields), [])[1])

    def hold(self, job_id: int, held: bool) -> JobOut:
        return self._job_operation(job_id, lambda now: (self.engine.hold(job_id, held, now), [])[1])

    def _job_operation(self, job_id: int, operation) -> JobOut:
        commands = operation(self.clock())
        job = self.find_job(job_id)
        self._commit()
        self._dispatch(commands)
        self.poke()
        return views.job_out(job, self.clock())

    def find_job(self, job_id: int) -> Job | None:
        return self.engine.jobs.get(job_id) or self.store.get_job(job_id)

    def job(self, job_id: int) -> JobOut | None:
        job = self.find_job(job_id)
        if job is None:
            return None
        out = views.job_out(job, self.clock())
        view = self.engine.views.pending.get(job_id)
        if view is not None:
            out.position = 1 + sum(1 for other in self.engine.views.pending.values() if other.order < view.order)
            out.priority = view.priority
        return out

    def nodes(self) -> list[NodeOut]:
        usage = node_usage(self.engine)
        owners: dict[str, dict[int, int]] = {}
        for job in self.engine.jobs.values():
            for s in job.slices:
                owners.setdefault(s.node, {}).update({g: job.id for g in s.gpus})
        return [views.node_out(n, usage.get(n.name, (set(), 0, 0)), owners.get(n.name, {}))
                for n in sorted(self.engine.nodes.values(), key=lambda n: n.name)]

    def partitions(self) -> list[PartitionOut]:
        return views.partition_outs(self.engine.config, list(self.engine.nodes.values()))

    def set_tenancy(self, spec) -> None:
        self.engine.set_tenancy(spec, self.clock())
        self._commit()
        self.poke()

    def add_reservation(self, spec):
        record = self.engine.add_reservation(spec, self.clock())
        self._commit()
        self.poke()
        return record

    def remove_reservation(self, name: str) -> None:
        self.engine.remove_reservation(name)
        self._commit()
        self.poke()

    def drain(self, node: str, drain: bool, reason: str) -> None:
        self.engine.set_drain(node, drain, reason)
        self._commit()
        self.poke()

    # ----- agents

    def register(self, reg: Registration) -> RegistrationReply:
        inventory = Inventory(
            gpus=tuple(Gpu(g.index, g.model, g.memory_mib, g.domain) for g in reg.gpus),
            cpus=reg.cpus, mem_mib=reg.mem_mib, address=reg.address)
        self.outbox.ack(reg.node, 1 << 62)  # reconciliation below decides what still needs sending
        kill, commands = self.engine.register_node(
            reg.node, inventory, set(reg.running_jobs), set(reg.finished_jobs), self.clock())
        self._commit()
        self._dispatch(commands)
        self.poke()
        log.info("node %s registered (%d GPUs)", reg.node, len(reg.gpus))
        return RegistrationReply(epoch=self.epoch, heartbeat_s=self.heartbeat_s, kill_jobs=kill)

    def check_agent(self, node: str, epoch: str | None) -> None:
        if epoch != self.epoch or not self.engine.contact(node, self.clock()):
            raise StaleAgent(node)

    def agent_events(self, node: str, batch: EventBatch) -> None:
        now = self.clock()
        commands: list[Command] = []
        for event in batch.events:
            if isinstance(event, NodeStarted):
                self.engine.node_started(node, event.job_id, now)
            elif isinstance(event, NodeFinished):
                tasks = [(t.rank, t.exit_code, t.signal) for t in event.tasks]
                commands += self.engine.node_finished(node, event.job_id, tasks, event.error, now)
            elif isinstance(event, StepFinished):
                tasks = [(t.rank, t.exit_code, t.signal) for t in event.tasks]
                commands += self.engine.step_finished(node, event.job_id, event.step_id, tasks, event.error, now)
        self._commit()
        self._dispatch(commands)
        # A task that started changes nothing the scheduler looks at: no cycle for it (the simulator's
        # driver does not run one either, and a cycle would only find the same plan).
        if any(not isinstance(event, NodeStarted) for event in batch.events):
            self.poke()

    async def agent_commands(self, node: str, after: int, wait_s: float) -> list[LaunchJob | SignalJob]:
        return await self.outbox.wait(node, after, wait_s)


def meta_value(engine: Engine, key: str):
    """What the store keeps under a cluster_meta key, as JSON-able data."""
    if key == "tenancy":
        return engine.tenancy.spec.model_dump()
    if key == "fairshare":
        return engine.fairshare.state()
    if key == "reservations":
        return engine.reservations.to_json()
    raise KeyError(key)
