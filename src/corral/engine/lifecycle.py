"""A job's way through the engine: waiting, started, being stopped, requeued or ended. Every state change
of an active job goes through here, which keeps the ActiveSet in step and collects the changed records.
"""
from __future__ import annotations

import dataclasses
import signal
from typing import Protocol

from corral import kill_reasons
from corral.core.model import NodeSlice
from corral.engine import steps
from corral.engine.active import ActiveSet
from corral.engine.after_run import (
    CrashLoop,
    Finish,
    RequeueBackoff,
    Reschedule,
    RestartInPlace,
    after_run,
    stop_towards,
)
from corral.engine.commands import Command, Kill, Launch
from corral.engine.config import EngineConfig
from corral.engine.deadlines import warn_at
from corral.engine.fairshare import FairShare
from corral.engine.history import (
    InfrastructureFailed,
    NodeFailed,
    NodesHeld,
    Preempted,
    Preempting,
    Requeued,
    WarningSignalSent,
)
from corral.engine.outcome import fold_exit, kill_reason
from corral.engine.records import (
    INFRA_REASON,
    NODE_FAILED,
    PREEMPTED,
    InfrastructureFailure,
    Job,
    JobState,
    NodeRun,
)
from corral.engine.tenancy import Tenancy

ACTIVE = (JobState.PENDING, JobState.RUNNING, JobState.COMPLETING)
SIGNAL_ONLY = -1.0  # Kill.grace_s: deliver the signal, no SIGKILL after it
REASON_MAX_CHARS = 200  # a Reason made of an agent's words is cut here (as LaunchFailed's)


class UnknownJob(KeyError):
    pass


class WrongState(ValueError):
    """The job's state does not allow the operation (the message says why)."""


class Restarts(Protocol):
    """Where restarting kinds' policies live (the engine's services): a replica's backoff, and being told
    of a restart decided."""

    def crash_loop(self, job: Job) -> CrashLoop | None: ...

    def restarting(self, job: Job, decision: RestartInPlace, now: float) -> None: ...


class Lifecycle:
    def __init__(self, config: EngineConfig, active: ActiveSet, fairshare: FairShare, tenancy: Tenancy) -> None:
        self.config = config
        self.active = active
        self.fairshare = fairshare
        self.tenancy = tenancy
        self.dirty: dict[int, Job] = {}  # changed since the last Result
        # Final states of ended jobs that dependencies may ask about: id -> (state, had started).
        self.ended: dict[int, tuple[JobState, bool]] = {}
        self.backoff = RequeueBackoff(config.requeue_backoff_s, config.requeue_backoff_max_s)
        self.restarts: Restarts | None = None  # set by the engine's services

    # ----- bookkeeping

    def get(self, job_id: int) -> Job:
        job = self.active.jobs.get(job_id)
        if job is None:
            raise UnknownJob(job_id)
        return job

    def touch(self, job: Job) -> None:
        self.dirty[job.id] = job

    def track(self, job: Job, now: float) -> None:
        """A job the engine did not hold: new, or restored from the store."""
        if job.state is JobState.PENDING:
            self.active.queue(job, now, self.tenancy, self.fairshare.factors())
        else:
            self.active.occupy(job, self.tenancy)

    def reprioritize(self, job: Job, now: float) -> None:
        self.active.reprioritize(job, now, self.tenancy, self.fairshare.factors())

    def restate(self, job: Job) -> None:
        self.active.restate(job, self.tenancy)

    def remember(self, job: Job) -> None:
        """The final state of an ended job a dependency refers to."""
        if job.state.terminal:
            self.ended[job.id] = (job.state, job.start_time is not None)

    def job_state(self, job_id: int) -> tuple[JobState | None, bool]:
        job = self.active.jobs.get(job_id)
        if job is not None:
            return job.state, job.start_time is not None
        return self.ended.get(job_id, (None, False))

    def set_reason(self, job: Job, reason: str, detail: str, estimate: float | None) -> None:
        if (job.reason, job.reason_detail, job.estimated_start) != (reason, detail, estimate):
            job.reason, job.reason_detail, job.estimated_start = reason, detail, estimate
            self.touch(job)

    def refresh_priorities(self, now: float, rebuild: bool = False) -> None:
        active = self.active
        active.views.refresh_priorities(active.jobs, now, self.tenancy, self.fairshare.factors(), active.claims,
                                        rebuild)

    def set_tenancy(self, tenancy: Tenancy, now: float) -> None:
        self.tenancy = tenancy
        self.refresh_priorities(now, rebuild=True)
        for job in self.active.jobs.values():
            if job.state is not JobState.PENDING:
                self.restate(job)

    # ----- starting

    def start(self, job: Job, slices: tuple[NodeSlice, ...], now: float) -> list[Command]:
        job.state, job.start_time, job.slices = JobState.RUNNING, now, slices
        job.end_time = None
        job.expedited, job.hold_nodes, job.hold_until = False, (), None
        job.reason, job.reason_detail, job.estimated_start = "None", "", None
        job.warned, job.ready, job.endpoints = False, False, {}
        # A batch job's script runs on its first node only; the other nodes wait for its steps. An
        # allocation runs nothing: its first node's part stands for the holder until it completes.
        kind = job.spec.kind
        launched = kind.launched(slices)
        job.runs = {s.node: NodeRun(started=not kind.launches_tasks) for s in launched}
        job.steps = []
        self.active.occupy(job, self.tenancy)
        self.touch(job)
        if not kind.launches_tasks:
            return []
        return [Launch(job.id, s.node) for s in launched]

    def preempt(self, victim_id: int, preemptor_id: int, cause: str, now: float) -> list[Command]:
        victim = self.active.jobs[victim_id]
        qos = self.tenancy.qos_of(victim.spec)
        victim.history.append(Preempted(now, preemptor_id, cause))
        victim.preemptions += 1
        victim.stop_cause = PREEMPTED
        preemptor = self.active.jobs.get(preemptor_id)
        if preemptor is not None:
            preemptor.history.append(Preempting(now, victim_id, cause))
            self.active.claims.setdefault(preemptor_id, set()).add(victim_id)
            self.reprioritize(preemptor, now)
            self.touch(preemptor)
        return self.begin_kill(victim, now, stop_towards(victim.spec, PREEMPTED, qos.preempt_mode),
                               grace_s=qos.grace_s)

    # ----- signals and deadlines

    def signal_commands(self, job: Job, signum: int, target: str) -> list[Command]:
        """Signal-only Kills. A batch job's own process is its batch shell ("batch"); a job started with
        a command has its tasks, which scancel treats as steps; srun steps are "steps"."""
        kind = job.spec.kind
        own = [n for n, r in job.runs.items() if not r.finished and kind.launches_tasks]
        own_scopes = ("all", kind.own_scope)
        # slurmstepd announces a SIGTERM or SIGKILL as a cancel, whoever sends it.
        reason = kill_reasons.CANCELLED if signum in (signal.SIGTERM, signal.SIGKILL) else None
        commands: list[Command] = []
        if target in own_scopes:
            commands += [Kill(job.id, n, signum, SIGNAL_ONLY, target="batch", reason=reason) for n in own]
        if target in ("all", "steps"):
            commands += steps.step_kills(job, signum, SIGNAL_ONLY, reason=reason)
        return commands

    def running_deadlines(self, job: Job, now: float) -> list[Command]:
        limit_at = job.run_start + job.spec.request.time_limit_s
        if now >= limit_at:
            return self.begin_kill(job, now, JobState.TIMEOUT)
        warn = warn_at(job)
        if warn is not None and now >= warn:
            job.history.append(WarningSignalSent(now, job.spec.warn_signal))
            job.warned = True
            self.touch(job)
            # --signal=B:SIG warns the batch shell only; plain --signal=SIG, every step (Slurm's rule).
            target = "batch" if job.spec.warn_batch else job.spec.kind.warn_target
            return self.signal_commands(job, job.spec.warn_signal, target)
        return []

    # ----- endings

    def begin_kill(self, job: Job, now: float, final: JobState, grace_s: float | None = None,
                   note: str = "") -> list[Command]:
        """Stop every node's tasks; the job ends as `final` (PENDING: it is requeued) once all report. A ready
        service replica is drained first: out of the endpoints now, its SIGTERM `service_drain_s` later.
        `note`: a line the agent writes into the job's log with the closing line (why a policy stopped it)."""
        # A replica the reconciler has already drained (Job.drain_until) is signalled at once. A session is
        # not drained: no other replica could take its user, who would only lose the notebook sooner.
        draining_now = (job.ready and job.state is JobState.RUNNING and job.drain_until is None
                        and not job.spec.session)
        drain_s = self.config.service_drain_s if draining_now else 0.0
        job.state, job.final_state = JobState.COMPLETING, final
        grace = self.config.kill_grace_s if grace_s is None else grace_s
        job.kill_deadline = now + drain_s + grace + self.config.kill_report_timeout_s
        if not job.spec.kind.launches_tasks:
            # Nothing of the holder's runs on the nodes: its part is over at once; steps get the signal.
            for node, run in job.runs.items():
                if not run.finished:
                    job.runs[node] = NodeRun(started=True, finished=True)
        self.restate(job)
        self.touch(job)
        nodes = self.kill_nodes(job)
        if not nodes:
            return self.end_run(job, now)
        reason = kill_reason(job)
        return [Kill(job.id, n, signal.SIGTERM, grace, reason=reason, drain_s=drain_s, note=note or None)
                for n in nodes]

    def resend_kill(self, job: Job, now: float) -> list[Command]:
        """A completing job's nodes have not reported its tasks gone by its kill deadline: SIGKILL again."""
        job.kill_deadline = now + self.config.kill_report_timeout_s
        self.active.rearm(job)
        return [Kill(job.id, n, signal.SIGKILL, 0.0, reason=kill_reason(job)) for n in self.kill_nodes(job)]

    def kill_nodes(self, job: Job) -> list[str]:
        """Nodes where something of the job may still run: its own unfinished parts and its live steps."""
        own = {n for n, r in job.runs.items() if not r.finished}
        return sorted(own | steps.live_step_nodes(job))

    def maybe_end(self, job: Job, now: float) -> list[Command]:
        """Once the job's own processes are done: end it, after killing the steps still running."""
        if job.state not in (JobState.RUNNING, JobState.COMPLETING) or not all(r.finished for r in job.runs.values()):
            return []
        if steps.live_step_nodes(job):
            if job.state is JobState.COMPLETING:
                return []
            decision = after_run(job, self.backoff)
            assert isinstance(decision, Finish), decision  # a run that ended by itself has no stop cause
            job.final_state = decision.state
            return self.begin_kill(job, now, job.final_state)
        return self.end_run(job, now)

    def fail_gang(self, job: Job, node: str, now: float, failure: InfrastructureFailure | None = None) -> list[Command]:
        """One node's part of the job is gone (the node was lost, or its agent forgot it; `failure`: corral's
        own machinery failed there). As Slurm does, a running job's whole gang is stopped and the job is then
        requeued if it may be (same id, restart count up by one), or ends NODE_FAIL (--no-requeue, an
        allocation). A job already being stopped ends as it was going to. An infrastructure failure is
        named in the history either way, and in the Reason of the job it stops."""
        self.touch(job)
        entry: NodeFailed | InfrastructureFailed = NodeFailed(now, node)
        if failure is not None:
            entry = InfrastructureFailed(now, node, kind=failure.kind, reason=failure.reason)
        if job.state is JobState.RUNNING:
            towards = stop_towards(job.spec, NODE_FAILED)
            again = towards is JobState.PENDING
            job.history.append(dataclasses.replace(entry, outcome="requeued" if again else towards.value))
            if again:
                job.stop_cause = NODE_FAILED
            if failure is not None:
                job.reason, job.reason_detail = f"{INFRA_REASON}:{node}: {failure.reason}"[:REASON_MAX_CHARS], ""
            return self.begin_kill(job, now, towards)
        if failure is not None:
            job.history.append(entry)
        if all(r.finished for r in job.runs.values()) and not steps.live_step_nodes(job):
            if job.final_state is None:
                job.final_state = JobState.NODE_FAIL
            return self.end_run(job, now)
        return []

    def end_run(self, job: Job, now: float) -> list[Command]:
        """The run is over on every node: end it (or requeue the job). What it returns tells the nodes where
        only the job's steps ran (`step_only_ends`) that the run ended."""
        ended_here = step_only_ends(job)
        steps.close_steps(job, now)
        self.fairshare.charge_job(job, now)
        self.active.release(job)
        restarts = self.restarts
        crash_loop = restarts.crash_loop(job) if restarts is not None and job.spec.kind.restarts else None
        decision = after_run(job, self.backoff, now, crash_loop)
        if isinstance(decision, Finish):
            self.finish(job, now, decision.state)
        elif isinstance(decision, Reschedule):
            self._requeue(job, None, now)
        else:
            if isinstance(decision, RestartInPlace) and restarts is not None:
                restarts.restarting(job, decision, now)
            self._requeue(job, decision.delay_s, now)
        return ended_here

    def _requeue(self, job: Job, delay_s: float | None, now: float) -> None:
        if delay_s is not None:
            job.eligible_at = now + delay_s
            self.active.deadlines.push_eligible(job)
        job.prior_gpu_seconds += job.run_gpu_seconds(now)
        cause, failed = None, ""
        if job.stop_cause == NODE_FAILED:
            failure = next((h for h in reversed(job.history)  # the job's own, not a step's
                            if isinstance(h, NodeFailed) or isinstance(h, InfrastructureFailed) and h.step is None),
                           None)
            failed = failure.node if failure is not None else ""
            cause = (f"infrastructure failure on {failed}: {failure.reason}"
                     if isinstance(failure, InfrastructureFailed) else f"node failure {failed}")
        job.history.append(Requeued(now, job.start_time, now, cause))
        if job.stop_cause == NODE_FAILED:
            if job.spec.expedited_requeue:
                self._expedite(job, failed, now)
        job.restart_count += 1
        job.state, job.final_state, job.kill_deadline = JobState.PENDING, None, None
        job.start_time = job.end_time = None
        job.slices, job.runs = (), {}
        job.ready, job.endpoints = False, {}
        job.exit_code = job.exit_signal = 0
        job.reason, job.reason_detail = "None", ""
        self.active.views.forget(job.id)
        self.reprioritize(job, now)
        self.touch(job)

    def _expedite(self, job: Job, failed: str, now: float) -> None:
        """--requeue=expedite: the job goes first, and the healthy nodes it ran on are held for it until it
        starts again or config.expedite_hold_s passes (not for a job in an advance reservation, whose nodes
        are the reservation's)."""
        job.expedited = True
        nodes = self.active.views.nodes
        healthy = tuple(n for n in job.node_names if n != failed and n in nodes and nodes[n].up)
        if healthy and not job.spec.reservation:
            job.hold_nodes, job.hold_until = healthy, now + self.config.expedite_hold_s
            self.active.holds[job.id] = job.hold_until
            job.history.append(NodesHeld(now, healthy, job.hold_until))

    def finish(self, job: Job, now: float, state: JobState) -> None:
        job.state, job.end_time, job.kill_deadline = state, now, None
        if state is JobState.CANCELLED and job.start_time is None:
            job.exit_code, job.exit_signal = 0, 0
        else:
            job.exit_code, job.exit_signal = fold_exit(job)
        job.estimated_start, job.ready = None, False
        self.touch(job)
        self.active.drop(job)
        self.ended[job.id] = (state, job.start_time is not None)


def step_only_ends(job: Job) -> list[Command]:
    """A Kill of everything of the job ("all", no grace, no closing line) for each node where its steps ran but
    none of its own tasks did: a batch job's nodes but its first, every node of an allocation. No runner of the
    job ends there, so without it their agents never learn the job ended, and keep what its steps left on the
    node (a named container, decision 0020) until the agent's spool is cleared. Nothing runs there any more:
    the Kill signals nothing, and the agent removes the job's directory on the node."""
    own = set(job.runs) if job.spec.kind.launches_tasks else set()
    nodes = sorted({node for step in job.steps for node in step.nodes} - own)
    return [Kill(job.id, node, signal.SIGKILL, 0.0) for node in nodes]
