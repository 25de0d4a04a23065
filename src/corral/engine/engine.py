"""The engine: one state machine. `handle(*events, now=...)` folds events (engine/events.py: submissions,
cancels, agent reports, the passing of time, a cycle coming due) into job and node records, runs
scheduling cycles through the pure core, and returns one Result (engine/result.py): commands for the
agents, the records and metadata that changed, and each event's reply. Nothing else changes its state.

It holds only active jobs (PENDING, RUNNING, COMPLETING), in its ActiveSet; a job that ends is handed
out in a Result and then forgotten (its final state is remembered for dependencies). The live controller
and the simulator both drive it; they differ only in how they carry out its commands, where `now` comes
from, and the profile it is built with (config.EngineProfile, build.py). A request the engine refuses
(UnknownJob, WrongState, StepRefused, a KeyError for an unknown node) raises before anything changed;
hand such requests over one per call.
"""
from __future__ import annotations

import signal
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from corral.api.schemas import JobSubmit
from corral.api.tenancy import TenancySpec
from corral.core.model import CyclePlan, PendingJob, Waiting
from corral.core.scheduler import schedule
from corral.engine import events as ev
from corral.engine import gates, shutdown, steps, submission
from corral.engine.active import ActiveSet
from corral.engine.commands import Command
from corral.engine.config import EngineConfig, EngineProfile
from corral.engine.fairshare import FairShare
from corral.engine.history import ClusterStopped, InfrastructureFailed, RanAsAgentUser
from corral.engine.lifecycle import ACTIVE, REASON_MAX_CHARS, Lifecycle, UnknownJob, WrongState
from corral.engine.node_events import NodeEvents
from corral.engine.outcome import node_result
from corral.engine.records import (
    CLUSTER_STOPPED,
    START_FAILED,
    InfrastructureFailure,
    Job,
    JobSpec,
    JobState,
    Node,
    NodeRun,
    Service,
)
from corral.engine.reservations import Reservations
from corral.engine.result import Result
from corral.engine.service_events import ServiceEvents
from corral.engine.snapshot import build_snapshot
from corral.engine.tenancy import Tenancy
from corral.engine.user_requests import UserRequests
from corral.engine.views import Views, hold_reservation

ACCRUE_EVERY_S = 30.0

__all__ = ["ACCRUE_EVERY_S", "Engine", "UnknownJob", "WrongState"]

Handler = Callable[[Any, float], tuple[Any, list[Command]]]


class Engine:
    """Built by corral.engine.build.build_engine, for the live controller, the simulator and the tests."""

    def __init__(self, config: EngineConfig, profile: EngineProfile, jobs: Iterable[Job] = (),
                 nodes: Iterable[Node] = (), next_job_id: int = 1, tenancy: TenancySpec | None = None,
                 fairshare_state: dict[str, Any] | None = None,
                 reservations: list[dict[str, Any]] | None = None, ended: Iterable[Job] = (),
                 unsaved_meta: Iterable[str] = (), archive: submission.JobArchive | None = None,
                 services: Iterable[Service] = ()) -> None:
        """`ended`: jobs that ended before, which dependencies of active jobs name; `unsaved_meta`:
        metadata keys the store does not have yet (the next Result names them); `archive`: the jobs the
        engine no longer holds, read by id (the controller's store), for new dependencies on ended jobs."""
        self.config = config
        self.profile = profile
        # The profile resolved once; None: no node is ever declared lost.
        self.node_timeout_s = profile.node_timeout_s(config)
        self.start_delay_s = profile.start_delay_s(config)
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        self.active = ActiveSet(config, self.nodes)
        tenancy_spec = tenancy or TenancySpec()
        state = fairshare_state or {}
        self.fairshare = FairShare(tenancy_spec, state.get("usage"), state.get("as_of", 0.0),
                                   state.get("charged_to"))
        self.life = Lifecycle(config, self.active, self.fairshare, Tenancy(tenancy_spec))
        self.reservations = Reservations(reservations or [])
        self.next_job_id = next_job_id
        self.archive = archive
        self._accrued_at = float("-inf")
        # Jobs submitted less than start_delay_s ago, oldest first: (submit time, id).
        self._fresh: deque[tuple[float, int]] = deque()
        self._dirty_meta: set[str] = set(unsaved_meta)
        self.last_plan: CyclePlan | None = None
        # The cluster is being stopped (shutdown.py): nothing starts or is preempted any more.
        self.stopping = False
        for job in ended:
            self.life.remember(job)
        for job in jobs:
            if job.state in ACTIVE:
                self.life.track(job, 0.0)
        self._requests = UserRequests(config, self.life, self.nodes)
        self._nodes = NodeEvents(config, self.nodes, self.active, self.life)
        self._services = ServiceEvents(self.life, self._submit_replica, self._admit_replica, self._max_time_s,
                                       services)
        self._handlers = self._handler_table()

    def _handler_table(self) -> dict[type, Handler]:
        requests, nodes, services = self._requests, self._nodes, self._services
        return {
            ev.SubmissionRequested: self._submission_requested,
            ev.JobSubmitted: self._submitted,
            ev.CancelRequested: requests.cancel,
            ev.SignalRequested: requests.signal,
            ev.RequeueRequested: requests.requeue,
            ev.UpdateRequested: requests.update,
            ev.HoldRequested: requests.hold,
            ev.StepRequested: requests.start_step,
            ev.AllocationCompleted: requests.complete,
            ev.NodeRegistered: nodes.registered,
            ev.NodeContacted: nodes.contacted,
            ev.TasksStarted: self._tasks_started,
            ev.TasksFinished: self._tasks_finished,
            ev.StepTasksFinished: self._step_tasks_finished,
            ev.NodeLost: lambda event, now: (None, nodes.lost(event.node, now)),
            ev.NodeUnhealthy: nodes.unhealthy,
            ev.DrainRequested: nodes.drain_requested,
            ev.TenancyChanged: self._tenancy_changed,
            ev.ReservationAdded: self._reservation_added,
            ev.ReservationRemoved: self._reservation_removed,
            ev.ClusterStopRequested: self._stop_requested,
            ev.ListenerStalled: nodes.listener_stalled,
            ev.TimePassed: lambda event, now: (None, self._tick(now)),
            ev.CycleDue: lambda event, now: (self.last_plan, self._schedule(now)),
            ev.UsageAccrualDue: self._usage_accrual_due,
            ev.ServiceApplied: services.applied,
            ev.ServiceScaled: services.scaled,
            ev.ServiceRestartRequested: services.restart_requested,
            ev.ServiceDeleted: services.deleted,
            ev.ProbesReported: services.probes_reported,
            ev.ServiceLoadReported: services.load_reported,
        }

    # ----- the one entry

    def handle(self, *events: ev.Event, now: float) -> Result:
        """Fold `events` in, in order, at time `now`; what changed leaves in the Result."""
        result = Result()
        for event in events:
            reply, commands = self._handlers[type(event)](event, now)
            result.replies.append(reply)
            result.commands.extend(commands)
        life, services = self.life, self._services
        if services.services:
            result.commands.extend(services.settle(list(life.dirty.values()), now))
            result.services = list(services.dirty.values())
            services.dirty.clear()
        if services.forgotten:
            result.services_forgotten = sorted(services.forgotten)
            services.forgotten.clear()
        result.jobs = list(life.dirty.values())
        life.dirty.clear()
        result.nodes = [self.nodes[n] for n in self._nodes.dirty if n in self.nodes]
        self._nodes.dirty.clear()
        result.meta = frozenset(self._dirty_meta)
        self._dirty_meta.clear()
        return result

    # ----- reads

    @property
    def jobs(self) -> dict[int, Job]:
        """The active jobs (read only)."""
        return self.active.jobs

    @property
    def views(self) -> Views:
        return self.active.views

    @property
    def pending(self) -> dict[int, PendingJob]:
        return self.active.pending

    @property
    def tenancy(self) -> Tenancy:
        return self.life.tenancy

    @property
    def claims(self) -> dict[int, set[int]]:
        return self.active.claims

    def job_state(self, job_id: int) -> tuple[JobState | None, bool]:
        return self.life.job_state(job_id)

    @property
    def services(self) -> dict[str, Service]:
        """The services (read only), deleted ones included until their last replica is gone."""
        return self._services.services

    def next_deadline(self, now: float | None = None) -> float | None:
        """When the engine must look again with nothing else happening. Past times are due now: each
        is acted on by TimePassed or CycleDue and so goes away, except the two kinds filtered by `now`
        (a reservation that has opened, a job that became preemptible), which would otherwise wake
        the caller in a loop."""
        active = self.active
        times: list[float] = []
        earliest = active.deadlines.earliest(active.jobs, active.views.running)
        if earliest is not None:
            times.append(earliest)
        if self.node_timeout_s is not None:
            times.extend(n.last_seen + self.node_timeout_s for n in self.nodes.values() if n.up)
        if self._fresh:
            times.append(self._fresh[0][0] + self.start_delay_s)
        if active.holds:
            times.append(min(active.holds.values()))
        later: list[float | None] = list(self.reservations.boundaries())
        later.append(active.deadlines.next_eligible(active.jobs, active.views.pending, now))
        if active.views.pending:
            # A waiting job may preempt a running one once that one's minimum runtime has passed:
            # nothing else may happen then, so wake up for it.
            if now is None:
                later.extend(v.preemptible_from for v in active.views.running.values()
                             if v.preemptible_from is not None and not v.completing)
            else:
                later.append(active.deadlines.next_preemptible(active.views.running, now))
        later.append(self._services.next_deadline(now))
        times.extend(t for t in later if t is not None and (now is None or t > now))
        return min(times, default=None)

    # ----- submissions

    def _submission_requested(self, event: ev.SubmissionRequested, now: float
                              ) -> tuple[tuple[int, list[int]], list[Command]]:
        """A submission as a user states it, decided by corral.engine.submission (or refused with an
        AdmissionError, having changed nothing). Reply: its first job id, and every array task's id ([] for
        a plain job)."""
        accepted = submission.decide(event.request, self._cluster_view(), self.archive)
        for target in accepted.dependency_targets:
            self.life.remember(target)
        ids = [self._submitted(ev.JobSubmitted(spec, accepted.held), now)[0].id for spec in accepted.specs]
        return (ids[0], ids if accepted.array else []), []

    def _cluster_view(self) -> submission.ClusterView:
        return submission.ClusterView(self.config, self._nodes.partition_members(), self.tenancy, self.reservations,
                                      self.active.jobs, self.next_job_id)

    def _admit_replica(self, request: JobSubmit) -> submission.Accepted:
        return submission.decide(request, self._cluster_view())

    def _submit_replica(self, request: JobSubmit, mark: Callable[[JobSpec], JobSpec], now: float) -> Job:
        """A service's replica, decided as any submission (quota, limits, partitions) and marked as the
        replica it is."""
        spec = self._admit_replica(request).specs[0]
        return self._submitted(ev.JobSubmitted(mark(spec)), now)[0]

    def _max_time_s(self, partition: str | None) -> int | None:
        config = self.config.partition(partition) if partition else self.config.default_partition
        return config.max_time_s if config is not None else None

    def _submitted(self, event: ev.JobSubmitted, now: float) -> tuple[Job, list[Command]]:
        job = Job(id=self.next_job_id, spec=event.spec, submit_time=now, held=event.held)
        self.next_job_id += 1
        if self.start_delay_s > 0:
            self._fresh.append((now, job.id))
        self.life.track(job, now)
        self.life.touch(job)
        return job, []

    # ----- scheduling

    def _schedule(self, now: float) -> list[Command]:
        if self.stopping:
            self._fresh.clear()  # nothing will start: their start delay is no deadline to wake up for
            return []
        life = self.life
        if now - self.active.views.priority_at >= self.tenancy.spec.priority.calc_period_s:
            self._accrue_usage(now)
            life.refresh_priorities(now)
        gated = self._gate_pending(now)
        gated.update(self._too_fresh(now))
        held = tuple(hold_reservation(self.active.jobs[job_id]) for job_id in self.active.holds)
        snapshot = build_snapshot(self.active, self.nodes, self.config, self.tenancy.queues,
                                  self.reservations.core() + held, now, exclude=gated,
                                  budgets=self._services.disruption_budgets())
        plan = schedule(snapshot, self.config.scheduler)
        self.last_plan = plan
        jobs = self.active.jobs
        commands: list[Command] = []
        for start in plan.starts:
            commands.extend(life.start(jobs[start.job_id], start.slices, now))
        set_reason = life.set_reason
        for job_id, record in plan.reasons():
            # `_value_`, not `.value` (a descriptor call): this runs for every pending job in every cycle.
            if isinstance(record, Waiting):
                set_reason(jobs[job_id], record.reason._value_, record.detail, record.estimated_start)
            else:
                set_reason(jobs[job_id], record._value_, "", None)
        for preempt in plan.preemptions:
            commands.extend(life.preempt(preempt.victim_id, preempt.preemptor_id, preempt.cause, now))
        return commands

    def _too_fresh(self, now: float) -> set[int]:
        delay = self.start_delay_s
        while self._fresh and self._fresh[0][0] + delay <= now:
            self._fresh.popleft()
        return {job_id for _, job_id in self._fresh}

    def cycle_wanted_for_submitted(self, jobs: list[Job]) -> bool:
        """Whether a cycle run now would do anything for these jobs, just submitted: start one (no start
        delay), or give one the reason that a gate holds it for (a dependency, a begin time, a QOS with a
        wall). Otherwise the first cycle that can act for them is the one at their start delay's end,
        which next_deadline already names: the controller sets its timer to it rather than run a cycle."""
        walled = self.tenancy.walled_qos
        return self.start_delay_s <= 0 or any(job.state is JobState.PENDING and _may_be_gated(job, walled)
                                                for job in jobs)

    def _gate_pending(self, now: float) -> set[int]:
        gated: set[int] = set()
        tenancy, jobs = self.tenancy, self.active.jobs
        walled = tenancy.walled_qos
        for job_id in self.active.views.pending:
            job = jobs[job_id]
            if not _may_be_gated(job, walled):
                continue
            blocked = gates.gate(job, now, tenancy, jobs, self.life.job_state)
            if blocked is not None:
                gated.add(job_id)
                self.life.set_reason(job, blocked[0].value, blocked[1], None)
        return gated

    # ----- agent reports

    def _tasks_started(self, event: ev.TasksStarted, now: float) -> tuple[None, list[Command]]:
        job = self.active.jobs.get(event.job_id)
        run = job.runs.get(event.node) if job and _this_run(job, event.restart_count) else None
        if job is not None and run is not None and not run.started:
            run.started = True
            if job.spec.service:
                self._services.started(job, event.node, dict(event.ports) if event.ports else None)
            node = self.nodes.get(event.node)
            if node is not None and not node.run_as_user:  # the job record says its tasks were not its user's
                job.history.append(RanAsAgentUser(now, node.name, node.agent_user))
            self.life.touch(job)
        return None, []

    def _tasks_finished(self, event: ev.TasksFinished, now: float) -> tuple[None, list[Command]]:
        life = self.life
        job = self.active.jobs.get(event.job_id)
        node = event.node
        if job is None or node not in job.runs or job.runs[node].finished:
            return None, []  # a repeat of a report already folded in
        if not _this_run(job, event.restart_count):
            return None, []  # a late report of an earlier run (requeued since), maybe on this same node
        if event.fenced is not None:
            # The node's leaders killed the run's tasks: it lost contact with the controller (decision 0017).
            run = job.runs[node]
            job.runs[node] = NodeRun(started=run.started, finished=True, signal=signal.SIGKILL)
            return None, life.fail_gang(job, node, now)
        if event.infrastructure is not None:
            # corral's own machinery failed under the tasks there: their exits say nothing of the job's own.
            self._drain_if_cannot_start(node, event.infrastructure)
            run = job.runs[node]
            job.runs[node] = NodeRun(started=run.started, finished=True, signal=signal.SIGKILL,
                                     usage=dict(event.usage) if event.usage is not None else None)
            return None, life.fail_gang(job, node, now, event.infrastructure)
        job.runs[node] = node_result(event.tasks, event.error, event.oom_killed, event.usage)
        if event.error is not None:
            job.reason = f"LaunchFailed:{event.error}"[:REASON_MAX_CHARS]
        life.touch(job)
        if all(r.finished for r in job.runs.values()):
            return None, life.maybe_end(job, now)
        if event.error is not None and job.state is JobState.RUNNING:
            # One node could not start its part of the gang: the whole gang ends.
            return None, life.begin_kill(job, now, JobState.FAILED)
        return None, []

    def _drain_if_cannot_start(self, node: str, failure: InfrastructureFailure) -> None:
        """An agent that cannot start tasks for a reason of its own (its spool, its cgroups) would fail every
        job sent there: its node is drained with the reason, as Slurm drains a node after a launch failure of
        slurmd's own, until an operator resumes it."""
        if failure.kind == START_FAILED:
            self._nodes.drain_for(node, f"cannot start tasks: {failure.reason}"[:REASON_MAX_CHARS])

    def _step_tasks_finished(self, event: ev.StepTasksFinished, now: float) -> tuple[None, list[Command]]:
        job = self.active.jobs.get(event.job_id)
        if job is None:
            return None, []
        commands = steps.step_finished(job, event.node, event.step_id, event.tasks, event.error, now,
                                       event.oom_killed, event.usage, event.infrastructure)
        if commands is None:
            return None, []
        failure = event.infrastructure
        if failure is not None:
            self._drain_if_cannot_start(event.node, failure)
            job.history.append(InfrastructureFailed(now, event.node, event.step_id, kind=failure.kind,
                                                    reason=failure.reason))
        self.life.touch(job)
        return None, commands + self.life.maybe_end(job, now)

    # ----- time

    def _accrue_usage(self, now: float) -> None:
        self.fairshare.accrue(self.active.running_jobs(), now)
        self._dirty_meta.add("fairshare")
        self._accrued_at = now

    def _usage_accrual_due(self, event: ev.UsageAccrualDue, now: float) -> tuple[None, list[Command]]:
        self._accrue_usage(now)
        return None, []

    def _tick(self, now: float) -> list[Command]:
        """Accrue fair-share usage, send warning signals, enforce time limits, re-send overdue kills,
        mark silent nodes down and drop expired reservations."""
        # Accrual integrates exactly over any interval (and a job's last stretch is charged when it
        # ends), so it need not run every cycle; priorities read it every calc_period_s.
        if now - self._accrued_at >= ACCRUE_EVERY_S:
            self._accrue_usage(now)
        life, active = self.life, self.active
        commands: list[Command] = []
        for job in active.deadlines.due(active.jobs, active.views.running, now):
            if job.state is JobState.RUNNING:
                commands.extend(life.running_deadlines(job, now))
            elif job.state is JobState.COMPLETING and job.kill_deadline is not None and now >= job.kill_deadline:
                commands.extend(life.resend_kill(job, now))
        timeout = self.node_timeout_s
        if timeout is not None:
            for node in self.nodes.values():
                if node.up and now - node.last_seen > timeout:
                    commands.extend(self._nodes.lost(node.name, now))
        if self.reservations.expire(now):
            self._dirty_meta.add("reservations")
        self._release_holds(now)
        self._services.due(now)
        return commands

    def _release_holds(self, now: float) -> None:
        """Expedited jobs that did not start within config.expedite_hold_s let their held nodes go (they
        still go first)."""
        active = self.active
        for job_id in [j for j, until in active.holds.items() if until <= now]:
            job = active.jobs[job_id]
            del active.holds[job_id]
            job.hold_nodes, job.hold_until = (), None
            self.life.reprioritize(job, now)
            self.life.touch(job)

    def _stop_requested(self, event: ev.ClusterStopRequested, now: float) -> tuple[shutdown.ClusterStop,
                                                                                   list[Command]]:
        """The cluster is stopping: stop every running job (requeue it or end it), start nothing more."""
        self.stopping = True
        running = self.active.running_jobs()
        pending = sum(1 for job in self.active.jobs.values() if job.state is JobState.PENDING)
        decision = shutdown.plan_stop(running, pending)
        commands: list[Command] = []
        requeue = set(decision.requeue)
        for job in running:
            if job.state is not JobState.RUNNING:
                continue
            again = job.id in requeue
            job.history.append(ClusterStopped(now, "requeued" if again else JobState.NODE_FAIL.value))
            if again:
                job.stop_cause = CLUSTER_STOPPED
            commands += self.life.begin_kill(job, now, JobState.PENDING if again else JobState.NODE_FAIL)
        decision.commands.extend(commands)
        return decision, commands

    # ----- tenancy and reservations

    def _tenancy_changed(self, event: ev.TenancyChanged, now: float) -> tuple[None, list[Command]]:
        self.fairshare.configure(event.spec)
        self._accrue_usage(now)
        self.life.set_tenancy(Tenancy(event.spec), now)
        self._dirty_meta.add("tenancy")
        return None, []

    def _reservation_added(self, event: ev.ReservationAdded, now: float) -> tuple[Any, list[Command]]:
        record = self.reservations.add(event.spec, self.nodes.values(), now)
        self._dirty_meta.add("reservations")
        return record, []

    def _reservation_removed(self, event: ev.ReservationRemoved, now: float) -> tuple[None, list[Command]]:
        self.reservations.remove(event.name)
        self._dirty_meta.add("reservations")
        return None, []


def _this_run(job: Job, restart_count: int | None) -> bool:
    """Whether an agent's report is about the job's current run: a requeued job may run again on the same
    node before the report of its earlier run arrives (an agent back from a lost contact sends it late)."""
    return restart_count is None or restart_count == job.restart_count


def _may_be_gated(job: Job, walled_qos: frozenset[str]) -> bool:
    """Whether a gate (gates.py) may hold the pending `job`: only then does a cycle look at its gates."""
    spec = job.spec
    return bool(spec.dependency) or spec.qos in walled_qos or spec.begin_time is not None \
        or job.eligible_at is not None
