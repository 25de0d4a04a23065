"""The engine's services: the Service records, their events, and carrying out the reconciler's plans
(engine/services.py) through the same submission and kill paths as users' jobs, so quota, limits,
fair share and preemption treat replicas exactly as jobs. Also the restart policy the after-run decision
asks for (Lifecycle.restarts): a replica's CrashLoopBackOff lives on its Service, per replica index.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from corral.api.schemas import JobSubmit
from corral.api.services import ServiceSpec
from corral.engine import events as ev
from corral.engine import services
from corral.engine.admission import AdmissionError
from corral.engine.after_run import CrashLoop, RestartInPlace
from corral.engine.commands import Command
from corral.engine.history import Cancelled, LivenessFailed, ReplicaStopped, Restarting
from corral.engine.lifecycle import Lifecycle, UnknownJob, WrongState
from corral.engine.records import Job, JobSpec, JobState, ReplicaRestarts, Service
from corral.limits import TIME_LIMIT_S_MAX

# Submits one replica: its JobSubmit, and how to mark the admitted spec as the replica; returns the Job (or
# raises AdmissionError, having changed nothing).
Submit = Callable[[JobSubmit, Callable[[JobSpec], JobSpec], float], Job]
Admit = Callable[[JobSubmit], object]  # the same decision, creating nothing (AdmissionError when refused)
# Spec fields that change no replica: a change of only these applies at once, without a new revision.
HISTORY_MAX = 200  # a Service keeps its latest history lines (a crash loop adds one per restart)
# How long a ready replica being stopped stays listed as draining before its SIGTERM: the gateway learns of it
# within its long poll's round (the controller answers within 0.1 s of a change) and sends it no new request;
# the requests it holds finish. Without it, requests sent in that moment were cut by the SIGTERM (a POST lost
# per rolling update in bench/services.py).
DRAIN_S = 2.0
IN_PLACE_FIELDS = frozenset({"replicas", "autoscale", "min_ready", "public", "update", "restart", "placement"})


class UnknownService(KeyError):
    pass


def replica_submission(spec: ServiceSpec, uid: int, index: int) -> JobSubmit:
    """What one replica asks for, as a user's submission would: one task per node, the service's
    resources, account, QOS and queue; no time limit of its own unless the spec sets one (the partition's
    maximum then bounds it, as any job's)."""
    env = {**spec.env, "CORRAL_SERVICE": spec.name, "CORRAL_REPLICA": str(index)}
    return JobSubmit(
        name=spec.name, user=spec.user, uid=uid, argv=list(spec.command) if spec.command is not None else None,
        script=spec.script, workdir=spec.workdir, env=env, partition=spec.partition, nodes=spec.nodes,
        ntasks_per_node=1, gpus_per_node=spec.gpus_per_node, cpus_per_task=spec.cpus_per_task,
        mem_mib=spec.mem_per_node_mib, gpu_model=spec.gpu_model, gpu_share=spec.gpu_share,
        time_limit_s=spec.time_limit_s,
        account=spec.account, qos=spec.qos, queue=spec.queue, output=f"{spec.name}-%j.out",
        exclude=spec.placement.exclude, constraint=spec.placement.constraint,
        container_image=spec.image or "", container_mounts=spec.image_mounts,
    )


class ServiceEvents:
    def __init__(self, life: Lifecycle, submit: Submit, admit: Admit, max_time_s: Callable[[str | None], int | None],
                 records: Iterable[Service] = ()) -> None:
        self.life = life
        self.submit = submit
        self.admit = admit
        self.max_time_s = max_time_s
        self.services: dict[str, Service] = {s.name: s for s in records}
        self.dirty: dict[str, Service] = {}
        self.forgotten: set[str] = set()  # deleted services whose last replica is gone: the store drops them
        self.touched: set[str] = set()  # to reconcile before the Result leaves
        # Each service's active replicas by id, kept up to date from the changed jobs of every Result (a
        # replica is created, changes and ends through the Lifecycle, which marks it changed).
        self._replica_ids: dict[str, set[int]] = {}
        for job in life.active.jobs.values():
            if job.spec.service:
                self._replica_ids.setdefault(job.spec.service, set()).add(job.id)
        life.restarts = self

    # ----- reads

    def replicas(self, name: str) -> list[Job]:
        """The service's active replicas, by id (ended ones are dropped from the index here)."""
        jobs = self.life.active.jobs
        ids = self._replica_ids.get(name)
        if not ids:
            return []
        ids.intersection_update(jobs)
        return [jobs[job_id] for job_id in sorted(ids)]

    def get(self, name: str) -> Service:
        service = self.services.get(name)
        if service is None or service.deleted:
            raise UnknownService(name)
        return service

    def disruption_budgets(self) -> dict[str, int]:
        """Per service with a min_ready: how many of its replicas preemption may still take (its ready,
        running replicas above min_ready)."""
        budgets: dict[str, int] = {}
        for service in self.services.values():
            if service.spec.min_ready > 0:
                ready = sum(1 for j in self.replicas(service.name) if j.state is JobState.RUNNING and j.ready)
                budgets[service.name] = max(0, ready - service.spec.min_ready)
        return budgets

    def next_deadline(self, now: float | None) -> float | None:
        times = [services.reconcile(s, self.replicas(s.name), now if now is not None else 0.0).next_at
                 for s in self.services.values() if s.update_started is not None]
        times += [job.drain_until for job in self._draining()]
        return min((t for t in times if t is not None and (now is None or t > now)), default=None)

    # ----- events

    def applied(self, event: ev.ServiceApplied, now: float) -> tuple[Service, list[Command]]:
        spec = event.spec.model_copy(update={"user": event.user})
        try:
            self.admit(self._submission(spec, event.uid, 0))
        except AdmissionError as exc:
            raise AdmissionError(_naming_resources(spec, str(exc))) from None
        service = self.services.get(spec.name)
        replicas = spec.autoscale.min_replicas if spec.autoscale is not None else spec.replicas
        if service is None or service.deleted:
            service = Service(spec=spec, revision=1, desired_replicas=replicas, created=now, uid=event.uid)
            self.services[spec.name] = service
            self.forgotten.discard(spec.name)
            service.history.append({"t": now, "event": "applied", "revision": 1})
        elif service.spec.user != event.user:
            raise WrongState(f"service {spec.name!r} belongs to {service.spec.user}")
        elif _replica_template(spec) != _replica_template(service.spec):
            self._new_revision(service, spec, now, "applied")
            service.desired_replicas, service.uid = replicas, event.uid
        elif spec != service.spec:
            service.spec, service.desired_replicas = spec, replicas
            service.history.append({"t": now, "event": "applied", "revision": service.revision})
        self._touch(service)
        return service, []

    def scaled(self, event: ev.ServiceScaled, now: float) -> tuple[Service, list[Command]]:
        service = self.get(event.name)
        service.desired_replicas, service.lower_since = event.replicas, None  # a new count: a new window
        service.history.append({"t": now, "event": "scaled", "replicas": event.replicas})
        self._touch(service)
        return service, []

    def restart_requested(self, event: ev.ServiceRestartRequested, now: float) -> tuple[Service, list[Command]]:
        service = self.get(event.name)
        self._new_revision(service, service.spec, now, "restart-requested")
        self._touch(service)
        return service, []

    def deleted(self, event: ev.ServiceDeleted, now: float) -> tuple[Service, list[Command]]:
        service = self.get(event.name)
        service.deleted = True
        service.history.append({"t": now, "event": "deleted"})
        self._touch(service)
        return service, []

    def probes_reported(self, event: ev.ProbesReported, now: float) -> tuple[None, list[Command]]:
        job = self.life.active.jobs.get(event.job_id)
        if job is None or job.state is not JobState.RUNNING or event.node not in job.runs:
            return None, []  # ended, or being stopped: its probes no longer matter
        if event.restart_count is not None and event.restart_count != job.restart_count:
            return None, []  # about an earlier run
        liveness = event.results.get("liveness")
        if liveness is not None and not liveness.ok:
            why = f"liveness probe failed {liveness.consecutive} times: {liveness.detail}".rstrip(": ")
            job.history.append(LivenessFailed(now, event.node, why))
            job.ready = False
            self.life.touch(job)
            self._touch_by_name(job.spec.service)
            return None, self.life.begin_kill(job, now, JobState.FAILED)
        readiness = event.results.get("readiness")
        if readiness is not None and readiness.ok != job.ready:
            job.ready = readiness.ok
            self.life.touch(job)
            self._touch_by_name(job.spec.service)
        return None, []

    def load_reported(self, event: ev.ServiceLoadReported, now: float) -> tuple[None, list[Command]]:
        service = self.get(event.name)
        service.load = (event.inflight, event.rps, event.at)
        if event.inflight or event.rps:
            service.last_busy = event.at
        want = services.autoscaled(service, now)
        if want is not None:
            want, service.lower_since = services.stabilised(service, want, now)
        if want is not None and want != service.desired_replicas:
            service.history.append({"t": now, "event": "autoscaled", "from": service.desired_replicas, "to": want})
            service.desired_replicas = want
            self._touch(service)
        self.dirty[service.name] = service
        return None, []

    # ----- agents' reports that concern replicas

    def started(self, job: Job, node: str, ports: dict[str, int] | None) -> None:
        """A replica's tasks started on `node`: its ports, and readiness when it has no readiness probe."""
        if ports:
            job.endpoints = {**job.endpoints, node: dict(ports)}
        service = self.services.get(job.spec.service)
        if service is not None and service.spec.probes.readiness is None and all(
                r.started for r in job.runs.values()):
            job.ready = True
        self._touch_by_name(job.spec.service)

    # ----- restarts (Lifecycle.restarts)

    def crash_loop(self, job: Job) -> CrashLoop | None:
        service = self.services.get(job.spec.service)
        if service is None or service.deleted:
            return None
        restarts = service.restarts.get(job.spec.replica, ReplicaRestarts())
        return CrashLoop(service.spec.restart, restarts.streak)

    def restarting(self, job: Job, decision: RestartInPlace, now: float) -> None:
        service = self.services[job.spec.service]
        restarts = service.restarts.setdefault(job.spec.replica, ReplicaRestarts())
        restarts.count += 1
        restarts.streak = decision.streak
        why = _why_ended(job)
        line = services.crash_loop_line(job.spec.replica, why, decision.delay_s)
        service.history.append({"t": now, "event": "restarted", "replica": job.spec.replica, "job": job.id,
                                "detail": line})
        del service.history[:-HISTORY_MAX]
        job.history.append(Restarting(now, line, decision.delay_s))
        self._touch(service)

    # ----- reconciling

    def settle(self, changed: Iterable[Job], now: float) -> list[Command]:
        """Reconcile every service touched by the events just handled, or whose replicas changed."""
        for job in changed:
            if job.spec.service:
                self._note(job)
        commands: list[Command] = []
        while self.touched:
            name = self.touched.pop()
            service = self.services.get(name)
            if service is not None:
                commands += self._carry_out(service, now)
        return commands

    def _note(self, job: Job) -> None:
        ids = self._replica_ids.setdefault(job.spec.service, set())
        if job.state.terminal:
            ids.discard(job.id)
            if job.spec.session:
                self._session_ended(job)
        else:
            ids.add(job.id)
            if job.spec.session and not services.present(job):
                # Cancelled and still stopping: the session is over now, or the reconciler would start
                # another replica in its place while this one's processes stop.
                self._session_ended(job)
        self.touched.add(job.spec.service)

    def _session_ended(self, job: Job) -> None:
        """A session's one run is over: its service goes with it (the reconciler would start another)."""
        service = self.services.get(job.spec.service)
        if service is None or service.deleted:
            return
        service.deleted = True
        service.history.append({"t": job.end_time or job.submit_time, "event": "session-ended",
                                "detail": f"job {job.id}: {_why_session_ended(job)}"})

    def due(self, now: float) -> None:
        """A deadline rang (an update's ready timeout, a drain's end): look at those services again."""
        self.touched.update(s.name for s in self.services.values() if s.update_started is not None)
        self.touched.update(job.spec.service for job in self._draining()
                            if job.drain_until is not None and job.drain_until <= now)

    def _draining(self) -> list[Job]:
        return [job for service in self.services.values() for job in self.replicas(service.name)
                if job.drain_until is not None and job.state is JobState.RUNNING]

    def _carry_out(self, service: Service, now: float) -> list[Command]:
        plan = services.reconcile(service, self.replicas(service.name), now)
        if plan.rollback:
            self._roll_back(service, now)
            plan = services.reconcile(service, self.replicas(service.name), now)
        commands: list[Command] = []
        for stop in plan.stop:
            job = self.life.active.jobs[stop.job_id]
            if job.drain_until is None:
                job.history.append(ReplicaStopped(now, stop.reason))
            if job.state is JobState.PENDING:
                self.life.finish(job, now, JobState.CANCELLED)
            elif job.state is JobState.RUNNING:
                commands += self._drain_then_kill(job, now)
            else:
                job.final_state = JobState.CANCELLED
                self.life.touch(job)
        reason = ""
        for start in plan.submit:
            reason = reason or self._submit_replica(service, start.index, now)
        if plan.update_done:
            service.update_started, service.previous_revision, service.previous_spec = None, 0, None
            service.history.append({"t": now, "event": "updated", "revision": service.revision})
        if reason != service.reason:
            service.reason = reason
        if service.deleted and not self.replicas(service.name):
            del self.services[service.name]
            self.forgotten.add(service.name)
        self.dirty[service.name] = service
        return commands

    def _drain_then_kill(self, job: Job, now: float) -> list[Command]:
        """A ready replica is first listed as draining (the gateway routes no new request to it) and killed
        DRAIN_S later; one that takes no traffic is killed at once."""
        if job.ready and job.drain_until is None:
            job.drain_until = now + DRAIN_S
            self.life.touch(job)
            return []
        if job.drain_until is not None and now < job.drain_until:
            return []
        return self.life.begin_kill(job, now, JobState.CANCELLED)

    def _submit_replica(self, service: Service, index: int, now: float) -> str:
        """Submits replica `index`; "" or why it could not be admitted (the service waits with it)."""
        revision = service.revision

        def mark(spec: JobSpec) -> JobSpec:
            placement = service.spec.placement
            spread = max(1, service.desired_replicas) if placement.spread else 0
            session = service.spec.session
            return dataclasses.replace(spec, service=service.name, service_revision=revision, replica=index,
                                       max_per_node=placement.max_per_node or 0, spread_replicas=spread,
                                       session=session, requeue=spec.requeue and not session)

        try:
            job = self.submit(self._submission(service.spec, service.uid, index), mark, now)
            self._replica_ids.setdefault(service.name, set()).add(job.id)
        except ValueError as exc:  # AdmissionError, TenancyError: the same words a user's sbatch would get
            return f"replica {index} not admitted: {exc}"
        return ""

    def _submission(self, spec: ServiceSpec, uid: int, index: int) -> JobSubmit:
        sub = replica_submission(spec, uid, index)
        if sub.time_limit_s is None:
            sub = sub.model_copy(update={"time_limit_s": self.max_time_s(spec.partition) or TIME_LIMIT_S_MAX})
        return sub

    def _new_revision(self, service: Service, spec: ServiceSpec, now: float, event: str) -> None:
        if service.update_started is None:
            service.previous_revision, service.previous_spec = service.revision, service.spec
        service.spec, service.revision, service.update_started = spec, service.revision + 1, now
        service.history.append({"t": now, "event": event, "revision": service.revision})

    def _roll_back(self, service: Service, now: float) -> None:
        """Back to the revision before the update: its replicas are current again, the new ones are replaced."""
        previous = service.previous_spec or service.spec
        failed = service.revision
        service.spec, service.revision = previous, service.previous_revision or service.revision
        service.update_started, service.previous_revision, service.previous_spec = None, 0, None
        service.history.append({"t": now, "event": "rolled-back", "failed_revision": failed,
                                "revision": service.revision,
                                "detail": f"revision {failed} not ready within {previous.update.ready_timeout_s:g} s"})

    def _touch(self, service: Service) -> None:
        self.touched.add(service.name)
        self.dirty[service.name] = service

    def _touch_by_name(self, name: str) -> None:
        if name in self.services:
            self._touch(self.services[name])


def _replica_template(spec: ServiceSpec) -> dict[str, Any]:
    """What of a spec its replicas are made of (a change there is a new revision: a rolling update)."""
    return spec.model_dump(exclude=set(IN_PLACE_FIELDS))


def _why_session_ended(job: Job) -> str:
    state = job.final_state or job.state
    if state is JobState.CANCELLED:
        reasons = [h.reason for h in job.history if isinstance(h, ReplicaStopped | Cancelled)]
        return f"cancelled ({reasons[-1]})" if reasons and reasons[-1] else "cancelled"
    if state is JobState.PREEMPTED:
        return "preempted"
    if state is JobState.NODE_FAIL:
        return "its node failed"
    return _why_ended(job)


def _why_ended(job: Job) -> str:
    last = job.history[-1] if job.history else None
    if isinstance(last, LivenessFailed):
        return last.detail
    if any(r.oom_killed for r in job.runs.values()):
        return "out of memory"
    if job.final_state is JobState.TIMEOUT:
        return "time limit"
    code = max((r.exit_code for r in job.runs.values()), default=0)
    sig = next((r.signal for r in job.runs.values() if r.signal), 0)
    return f"killed by signal {sig}" if sig else f"exited with {code}"


__all__ = ["ServiceEvents", "UnknownJob", "UnknownService", "replica_submission"]


# A replica's resources, as the spec names them: what a "never fits" refusal is about.
RESOURCE_FIELDS = ("nodes", "gpus_per_node", "gpu_model", "cpus_per_task", "mem_per_node_mib", "partition")


def _naming_resources(spec: ServiceSpec, refusal: str) -> str:
    """sbatch's words for a replica that can never fit, led by the spec's fields they are about
    ("gpus_per_node=64: no replica can ever fit: requested node configuration is not available: ...")."""
    if not refusal.startswith("requested node configuration is not available"):
        return refusal
    given = [f"{name}={getattr(spec, name)}" for name in RESOURCE_FIELDS if name in spec.model_fields_set]
    return f"{', '.join(given) or 'the replica resources'}: no replica can ever fit: {refusal}"
