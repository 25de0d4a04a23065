"""The engine: folds stimuli (submissions, cancels, agent reports, the passing of time) into job and node
records, runs scheduling cycles through the pure core, and returns commands for the shell to carry out.

It holds only active jobs (PENDING, RUNNING, COMPLETING) in memory; a job that ends is handed to the
store through the dirty set and then forgotten (its final state is remembered for dependencies). The live
controller and the simulator both drive this class; they differ only in how they carry out its commands
and where `now` comes from.
"""
from __future__ import annotations

import dataclasses
import signal
from collections import deque
from collections.abc import Iterable
from typing import Any

from corral import kill_reasons
from corral.api.schemas import JobSubmit
from corral.api.tenancy import ReservationSpec, TenancySpec
from corral.core.model import CyclePlan, NodeSlice, PendingJob
from corral.core.scheduler import schedule
from corral.engine import gates, membership, shutdown, steps, submission
from corral.engine.commands import Command, Kill, Launch
from corral.engine.config import EngineConfig
from corral.engine.deadlines import Deadlines
from corral.engine.fairshare import FairShare
from corral.engine.membership import Inventory
from corral.engine.outcome import final_state, fold_exit, kill_reason, node_result
from corral.engine.records import Job, JobSpec, JobState, Node, NodeRun, Step
from corral.engine.reservations import Reservation, Reservations
from corral.engine.snapshot import build_snapshot
from corral.engine.tenancy import Tenancy
from corral.engine.usage import NodeUsage
from corral.engine.views import Views

ACTIVE = (JobState.PENDING, JobState.RUNNING, JobState.COMPLETING)
SIGNAL_ONLY = -1.0  # Kill.grace_s: deliver the signal, no SIGKILL after it
ACCRUE_EVERY_S = 30.0


class UnknownJob(KeyError):
    pass


class WrongState(ValueError):
    """The job's state does not allow the operation (the message says why)."""


class Engine:
    def __init__(self, config: EngineConfig, jobs: Iterable[Job] = (), nodes: Iterable[Node] = (),
                 next_job_id: int = 1, tenancy: TenancySpec | None = None,
                 fairshare_state: dict[str, Any] | None = None,
                 reservations: list[dict[str, Any]] | None = None) -> None:
        self.config = config
        self.tenancy = Tenancy(tenancy or TenancySpec())
        state = fairshare_state or {}
        self.fairshare = FairShare(self.tenancy.spec, state.get("usage"), state.get("as_of", 0.0),
                                   state.get("charged_to"))
        self.reservations = Reservations(reservations or [])
        self.jobs: dict[int, Job] = {}
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        self.next_job_id = next_job_id
        self.views = Views()
        self.usage = NodeUsage()
        self.deadlines = Deadlines()
        self._accrued_at = float("-inf")
        # Final states of ended jobs that dependencies may ask about: id -> (state, had started).
        self.ended: dict[int, tuple[JobState, bool]] = {}
        # Pending jobs that preempted others and wait for them: preemptor id -> victim ids.
        self.claims: dict[int, set[int]] = {}
        # Jobs submitted less than config.start_delay_s ago, oldest first: (submit time, id).
        self._fresh: deque[tuple[float, int]] = deque()
        self.dirty_jobs: dict[int, Job] = {}
        self.dirty_nodes: set[str] = set()
        self.meta_dirty: set[str] = set()
        self.last_plan: CyclePlan | None = None
        # The cluster is being stopped (shutdown.py): nothing starts or is preempted any more.
        self.stopping = False
        for job in jobs:
            if job.state in ACTIVE:
                self._track(job, 0.0)

    # ----- bookkeeping

    @property
    def pending(self) -> dict[int, PendingJob]:
        return self.views.pending

    def _track(self, job: Job, now: float) -> None:
        self.jobs[job.id] = job
        if job.state is JobState.PENDING:
            self.views.pending_view(self, job, now)
            self.deadlines.push_eligible(job)
        else:
            self.views.running_view(self, job)
            self.usage.add(job)

    def _touch(self, job: Job) -> None:
        self.dirty_jobs[job.id] = job

    def _active(self) -> list[Job]:
        """Running and completing jobs (those with a running view), in job id order, as self.jobs has
        them: the per-cycle passes over them need not walk a long pending queue."""
        return [self.jobs[job_id] for job_id in sorted(self.views.running)]

    def take_dirty(self) -> tuple[list[Job], list[Node]]:
        jobs = list(self.dirty_jobs.values())
        nodes = [self.nodes[n] for n in self.dirty_nodes if n in self.nodes]
        self.dirty_jobs.clear()
        self.dirty_nodes.clear()
        return jobs, nodes

    def job_state(self, job_id: int) -> tuple[JobState | None, bool]:
        job = self.jobs.get(job_id)
        if job is not None:
            return job.state, job.start_time is not None
        return self.ended.get(job_id, (None, False))

    def remember(self, job: Job) -> None:
        """Tell the engine the final state of an ended job a dependency refers to (loaded by the shell)."""
        if job.state.terminal:
            self.ended[job.id] = (job.state, job.start_time is not None)

    def set_tenancy(self, spec: TenancySpec, now: float) -> None:
        self.tenancy = Tenancy(spec)
        self.fairshare.configure(spec)
        self.views.refresh_priorities(self, now, rebuild=True)
        for job in self.jobs.values():
            if job.state is not JobState.PENDING:
                self.views.running_view(self, job)
        self.meta_dirty.add("tenancy")

    # ----- user stimuli

    def submit(self, spec: JobSpec, now: float, held: bool = False) -> Job:
        job = Job(id=self.next_job_id, spec=spec, submit_time=now, held=held)
        self.next_job_id += 1
        if self.config.start_delay_s > 0:
            self._fresh.append((now, job.id))
        self._track(job, now)
        self._touch(job)
        return job

    def submit_request(self, sub: JobSubmit, now: float, archive: submission.JobArchive | None = None,
                       ) -> tuple[int, list[int]]:
        """A submission as a user states it, decided by corral.engine.submission: (its first job id, every
        array task's id or [] for a plain job), or AdmissionError, having changed nothing. `archive`: the
        jobs this engine no longer holds, for dependencies on ended jobs."""
        accepted = submission.decide(sub, submission.ClusterView(
            self.config, self.nodes.values(), self.tenancy, self.reservations, self.jobs, self.next_job_id), archive)
        for target in accepted.dependency_targets:
            self.remember(target)
        ids = [self.submit(spec, now, held=accepted.held).id for spec in accepted.specs]
        return ids[0], (ids if accepted.array else [])

    def cancel(self, job_id: int, now: float, uid: int | None = None) -> list[Command]:
        job = self._get(job_id)
        job.history.append({"t": now, "event": "cancelled", "uid": uid})
        if job.state is JobState.PENDING:
            self._finish(job, now, JobState.CANCELLED)
            return []
        if job.state is JobState.RUNNING:
            return self._begin_kill(job, now, JobState.CANCELLED)
        job.final_state = JobState.CANCELLED  # completing: cancel wins over a pending requeue
        self._touch(job)
        return []

    def requeue(self, job_id: int, now: float) -> list[Command]:
        job = self._get(job_id)
        if not job.spec.requeue:
            raise WrongState(f"job {job_id} was submitted with --no-requeue")
        if job.state is not JobState.RUNNING:
            raise WrongState(f"job {job_id} is {job.state.value}: only a running job can be requeued")
        job.history.append({"t": now, "event": "requeue-requested"})
        return self._begin_kill(job, now, JobState.PENDING)

    def signal(self, job_id: int, signum: int, scope: str, now: float, uid: int | None = None) -> list[Command]:
        """Deliver a signal without ending the job (scancel --signal). `scope`, as scancel's: "steps"
        (the default: the job's tasks, not a batch shell), "batch" (the batch shell only) or "full"."""
        job = self._get(job_id)
        if job.state is not JobState.RUNNING:
            raise WrongState(f"job {job_id} is {job.state.value}: only a running job can be signaled")
        job.history.append({"t": now, "event": "signaled", "signal": signum, "scope": scope, "uid": uid})
        self._touch(job)
        return self._signal_commands(job, signum, "batch" if scope == "batch" else
                                     "steps" if scope == "steps" else "all")

    def _signal_commands(self, job: Job, signum: int, target: str) -> list[Command]:
        """Signal-only Kills. A batch job's own process is its batch shell ("batch"); a job started with
        a command has its tasks, which scancel treats as steps; srun steps are "steps"."""
        own = [n for n, r in job.runs.items() if not r.finished and not job.spec.allocation]
        own_scopes = ("all", "batch") if job.spec.batch else ("all", "steps")
        # slurmstepd announces a SIGTERM or SIGKILL as a cancel, whoever sends it.
        reason = kill_reasons.CANCELLED if signum in (signal.SIGTERM, signal.SIGKILL) else None
        commands: list[Command] = []
        if target in own_scopes:
            commands += [Kill(job.id, n, signum, SIGNAL_ONLY, target="batch", reason=reason) for n in own]
        if target in ("all", "steps"):
            commands += steps.step_kills(job, signum, SIGNAL_ONLY, reason=reason)
        return commands

    def update(self, job_id: int, now: float, *, name: str | None = None, comment: str | None = None,
               time_limit_s: int | None = None, priority: int | None = None) -> Job:
        """scontrol update: a job's name, comment and time limit while it is active; its priority while
        it waits. Everything is checked before anything changes."""
        job = self._get(job_id)
        spec, request = job.spec, job.spec.request
        if priority is not None and job.state is not JobState.PENDING:
            raise WrongState(f"job {job_id} is {job.state.value}: only a pending job's priority can change")
        if time_limit_s is not None:
            partition = self.config.partition(request.partition)
            cap = partition.max_time_s if partition is not None else None
            if cap is not None and time_limit_s > cap:
                raise WrongState(f"requested time limit {time_limit_s}s exceeds the maximum {cap}s of partition "
                                 f"{request.partition!r}")
            request = dataclasses.replace(request, time_limit_s=time_limit_s)
        changes: dict[str, Any] = {k: v for k, v in (("name", name), ("comment", comment), ("priority", priority))
                                   if v is not None}
        job.spec = dataclasses.replace(spec, request=request, **changes)
        if time_limit_s is not None:
            changes["time_limit_s"] = time_limit_s
        job.history.append({"t": now, "event": "updated", **changes})
        if job.state is JobState.PENDING:
            self.views.pending_view(self, job, now)
        else:
            self.views.running_view(self, job)
        self._touch(job)
        return job

    def start_step(self, job_id: int, request: steps.StepRequest, now: float) -> tuple[Step, list[Command]]:
        return steps.start_step(self, self._get(job_id), request, now)

    def step_finished(self, node: str, job_id: int, step_id: int, tasks: list[tuple[int, int, int]],
                      error: str | None, now: float) -> list[Command]:
        return steps.step_finished(self, node, job_id, step_id, tasks, error, now)

    def complete(self, job_id: int, exit_code: int, signum: int, now: float) -> list[Command]:
        """An allocation's holder (salloc, or srun outside a job) is done with it."""
        job = self._get(job_id)
        if not job.spec.allocation:
            raise WrongState(f"job {job_id} is not an allocation (salloc): it ends when its tasks do")
        if job.state is not JobState.RUNNING:
            raise WrongState(f"job {job_id} is {job.state.value}: only a running allocation can be completed")
        job.history.append({"t": now, "event": "completed", "exit_code": exit_code, "signal": signum})
        for node in job.runs:
            job.runs[node] = NodeRun(started=True, finished=True, exit_code=exit_code, signal=signum)
        self._touch(job)
        return self._maybe_end(job, now)

    def _maybe_end(self, job: Job, now: float) -> list[Command]:
        """Once the job's own processes are done: end it, after killing the steps still running."""
        if job.state not in (JobState.RUNNING, JobState.COMPLETING) or not all(r.finished for r in job.runs.values()):
            return []
        if steps.live_step_nodes(job):
            if job.state is JobState.COMPLETING:
                return []
            job.final_state = final_state(job)
            return self._begin_kill(job, now, job.final_state)
        self._end_run(job, now)
        return []

    def hold(self, job_id: int, held: bool, now: float) -> Job:
        job = self._get(job_id)
        if job.state is not JobState.PENDING:
            raise WrongState(f"job {job_id} is {job.state.value}: only a pending job can be held or released")
        job.held = held
        self.views.pending_view(self, job, now)
        self._touch(job)
        return job

    def _get(self, job_id: int) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise UnknownJob(job_id)
        return job

    # ----- scheduling

    def schedule(self, now: float) -> list[Command]:
        if self.stopping:
            self._fresh.clear()  # nothing will start: their start delay is no deadline to wake up for
            return []
        if now - self.views.priority_at >= self.tenancy.spec.priority.calc_period_s:
            self.views.refresh_priorities(self, now)
        gated = self._gate_pending(now)
        gated.update(self._too_fresh(now))
        plan = schedule(build_snapshot(self, now, exclude=gated), self.config.scheduler)
        self.last_plan = plan
        commands: list[Command] = []
        for start in plan.starts:
            commands.extend(self._start(self.jobs[start.job_id], start.slices, now))
        for wait in plan.waiting:
            # `_value_`, not `.value` (a descriptor call): this runs for every pending job in every cycle.
            self._set_reason(self.jobs[wait.job_id], wait.reason._value_, wait.detail, wait.estimated_start)
        for preempt in plan.preemptions:
            commands.extend(self._preempt(preempt.victim_id, preempt.preemptor_id, preempt.cause, now))
        return commands

    def _too_fresh(self, now: float) -> set[int]:
        delay = self.config.start_delay_s
        while self._fresh and self._fresh[0][0] + delay <= now:
            self._fresh.popleft()
        return {job_id for _, job_id in self._fresh}

    def _gate_pending(self, now: float) -> set[int]:
        gated: set[int] = set()
        walled = self.tenancy.walled_qos
        for job_id in self.views.pending:
            job = self.jobs[job_id]
            if not job.spec.dependency and job.spec.qos not in walled and job.spec.begin_time is None \
                    and job.eligible_at is None:
                continue
            blocked = gates.gate(self, job, now)
            if blocked is not None:
                gated.add(job_id)
                self._set_reason(job, blocked[0].value, blocked[1], None)
        return gated

    def _set_reason(self, job: Job, reason: str, detail: str, estimate: float | None) -> None:
        if (job.reason, job.reason_detail, job.estimated_start) != (reason, detail, estimate):
            job.reason, job.reason_detail, job.estimated_start = reason, detail, estimate
            self._touch(job)

    def _start(self, job: Job, slices: tuple[NodeSlice, ...], now: float) -> list[Command]:
        self.views.pending.pop(job.id, None)
        self.claims.pop(job.id, None)
        job.state, job.start_time, job.slices = JobState.RUNNING, now, slices
        job.end_time = None
        job.reason, job.reason_detail, job.estimated_start = "None", "", None
        # A batch job's script runs on its first node only; the other nodes wait for its steps. An
        # allocation runs nothing: its first node's part stands for the holder until it completes.
        launched = slices[:1] if job.spec.batch or job.spec.allocation else slices
        job.runs = {s.node: NodeRun(started=job.spec.allocation) for s in launched}
        job.steps = []
        self.views.running_view(self, job)
        self.usage.add(job)
        self._touch(job)
        if job.spec.allocation:
            return []
        return [Launch(job.id, s.node) for s in launched]

    def _preempt(self, victim_id: int, preemptor_id: int, cause: str, now: float) -> list[Command]:
        victim = self.jobs[victim_id]
        qos = self.tenancy.qos_of(victim.spec)
        victim.history.append({"t": now, "event": "preempted", "by": preemptor_id, "cause": cause})
        preemptor = self.jobs.get(preemptor_id)
        if preemptor is not None:
            preemptor.history.append({"t": now, "event": "preempting", "victim": victim_id, "cause": cause})
            self.claims.setdefault(preemptor_id, set()).add(victim_id)
            self.views.pending_view(self, preemptor, now)
            self._touch(preemptor)
        requeue = qos.preempt_mode == "requeue" and victim.spec.requeue
        return self._begin_kill(victim, now, JobState.PENDING if requeue else JobState.PREEMPTED,
                                grace_s=qos.grace_s)

    # ----- agent reports

    def node_started(self, node: str, job_id: int, now: float) -> None:
        job = self.jobs.get(job_id)
        run = job.runs.get(node) if job else None
        if job is not None and run is not None and not run.started:
            run.started = True
            self._touch(job)

    def node_finished(self, node: str, job_id: int, tasks: list[tuple[int, int, int]], error: str | None,
                      now: float) -> list[Command]:
        job = self.jobs.get(job_id)
        if job is None or node not in job.runs or job.runs[node].finished:
            return []  # a repeat of a report already folded in
        job.runs[node] = node_result(tasks, error)
        if error is not None:
            job.reason = f"LaunchFailed:{error}"[:200]
        self._touch(job)
        if all(r.finished for r in job.runs.values()):
            return self._maybe_end(job, now)
        if error is not None and job.state is JobState.RUNNING:
            # One node could not start its part of the gang: the whole gang ends.
            return self._begin_kill(job, now, JobState.FAILED)
        return []

    # ----- time

    def accrue_usage(self, now: float) -> None:
        self.fairshare.accrue(self._active(), now)
        self.meta_dirty.add("fairshare")
        self._accrued_at = now

    def tick(self, now: float) -> list[Command]:
        """Accrue fair-share usage, send warning signals, enforce time limits, re-send overdue kills,
        mark silent nodes down and drop expired reservations."""
        # Accrual integrates exactly over any interval (and a job's last stretch is charged when it
        # ends), so it need not run every cycle; priorities read it every calc_period_s.
        if now - self._accrued_at >= ACCRUE_EVERY_S:
            self.accrue_usage(now)
        commands: list[Command] = []
        for job in self.deadlines.due(self, now):
            if job.state is JobState.RUNNING:
                commands.extend(self._running_deadlines(job, now))
            elif job.state is JobState.COMPLETING and job.kill_deadline is not None and now >= job.kill_deadline:
                job.kill_deadline = now + self.config.kill_report_timeout_s
                self.deadlines.push(self, job)
                commands.extend(Kill(job.id, n, signal.SIGKILL, 0.0, reason=kill_reason(job))
                                for n in self._kill_nodes(job))
        timeout = self.config.node_timeout_s
        for node in self.nodes.values() if timeout != float("inf") else ():
            if node.up and now - node.last_seen > timeout:
                commands.extend(self.node_lost(node.name, now))
        if self.reservations.expire(now):
            self.meta_dirty.add("reservations")
        return commands

    def _running_deadlines(self, job: Job, now: float) -> list[Command]:
        limit_at = job.run_start + job.spec.request.time_limit_s
        if now >= limit_at:
            return self._begin_kill(job, now, JobState.TIMEOUT)
        warn_at = self._warn_at(job)
        if warn_at is not None and now >= warn_at:
            job.history.append({"t": now, "event": "signal", "signal": job.spec.warn_signal})
            self._touch(job)
            # --signal=B:SIG warns the batch shell only; plain --signal=SIG, every step (Slurm's rule).
            target = "batch" if job.spec.warn_batch else "steps" if job.spec.batch else "all"
            return self._signal_commands(job, job.spec.warn_signal, target)
        return []

    def _warn_at(self, job: Job) -> float | None:
        if not job.spec.warn_signal:
            return None
        if any(h.get("event") == "signal" and h["t"] >= job.start_time for h in job.history):
            return None
        return job.run_start + job.spec.request.time_limit_s - job.spec.warn_before_s

    def next_deadline(self, now: float | None = None) -> float | None:
        """When the engine must look again with nothing else happening. Past times are due now: each
        is acted on by tick() or schedule() and so goes away, except the two kinds filtered by `now`
        (a reservation that has opened, a job that became preemptible), which would otherwise wake
        the caller in a loop."""
        times: list[float] = []
        earliest = self.deadlines.earliest(self)
        if earliest is not None:
            times.append(earliest)
        if self.config.node_timeout_s != float("inf"):  # the simulator's nodes never go silent
            times.extend(n.last_seen + self.config.node_timeout_s for n in self.nodes.values() if n.up)
        if self._fresh:
            times.append(self._fresh[0][0] + self.config.start_delay_s)
        later: list[float | None] = list(self.reservations.boundaries())
        later.append(self.deadlines.next_eligible(self, now))
        if self.views.pending:
            # A waiting job may preempt a running one once that one's minimum runtime has passed:
            # nothing else may happen then, so wake up for it.
            if now is None:
                later.extend(v.preemptible_from for v in self.views.running.values()
                             if v.preemptible_from is not None and not v.completing)
            else:
                later.append(self.deadlines.next_preemptible(self, now))
        times.extend(t for t in later if t is not None and (now is None or t > now))
        return min(times, default=None)

    def stop_cluster(self, now: float) -> shutdown.ClusterStop:
        """The cluster is stopping: stop every running job (requeue it or end it), start nothing more."""
        return shutdown.stop_cluster(self, now)

    # ----- nodes

    def register_node(self, name: str, inventory: Inventory, running: set[int], finished: set[int],
                      now: float) -> tuple[list[int], list[Command]]:
        return membership.register(self, name, inventory, running, finished, now)

    def contact(self, name: str, now: float) -> bool:
        return membership.contact(self, name, now)

    def discount_stall(self, stall_s: float, now: float) -> None:
        membership.discount_stall(self, stall_s, now)

    def set_drain(self, name: str, drain: bool, reason: str = "") -> Node:
        if name not in self.nodes:
            raise KeyError(name)
        return membership.set_drain(self, name, drain, reason)

    def node_lost(self, name: str, now: float) -> list[Command]:
        node = self.nodes[name]
        node.up = False
        self.dirty_nodes.add(name)
        self.usage.changed(name)
        commands: list[Command] = []
        for job in list(self.jobs.values()):
            if job.state not in (JobState.RUNNING, JobState.COMPLETING) or name not in job.node_names:
                continue
            steps.node_lost(job, name, now)
            run = job.runs.get(name)
            if run is not None and not run.finished:
                job.runs[name] = NodeRun(started=run.started, finished=True, signal=signal.SIGKILL)
            if job.state is JobState.RUNNING or run is not None and not run.finished:
                commands.extend(self._fail_gang(job, now))
            else:
                commands.extend(self._maybe_end(job, now))
        return commands

    def _fail_gang(self, job: Job, now: float) -> list[Command]:
        self._touch(job)
        if all(r.finished for r in job.runs.values()) and not steps.live_step_nodes(job):
            if job.final_state is None:
                job.final_state = JobState.NODE_FAIL
            self._end_run(job, now)
            return []
        if job.state is JobState.RUNNING:
            return self._begin_kill(job, now, JobState.NODE_FAIL)
        return []

    # ----- endings

    def _begin_kill(self, job: Job, now: float, final: JobState, grace_s: float | None = None) -> list[Command]:
        """Stop every node's tasks; the job ends as `final` (PENDING: it is requeued) once all report."""
        job.state, job.final_state = JobState.COMPLETING, final
        grace = self.config.kill_grace_s if grace_s is None else grace_s
        job.kill_deadline = now + grace + self.config.kill_report_timeout_s
        if job.spec.allocation:
            # Nothing of the holder's runs on the nodes: its part is over at once; steps get the signal.
            for node, run in job.runs.items():
                if not run.finished:
                    job.runs[node] = NodeRun(started=True, finished=True)
        self.views.running_view(self, job)
        self._touch(job)
        nodes = self._kill_nodes(job)
        if not nodes:
            self._end_run(job, now)
            return []
        reason = kill_reason(job)
        return [Kill(job.id, n, signal.SIGTERM, grace, reason=reason) for n in nodes]

    def _kill_nodes(self, job: Job) -> list[str]:
        """Nodes where something of the job may still run: its own unfinished parts and its live steps."""
        own = {n for n, r in job.runs.items() if not r.finished}
        return sorted(own | steps.live_step_nodes(job))

    def _end_run(self, job: Job, now: float) -> None:
        steps.close_steps(job, now)
        self.fairshare.charge_job(job, now)
        self.usage.remove(job)
        if job.final_state is JobState.PENDING:
            self._requeue(job, now)
        else:
            self._finish(job, now, final_state(job))

    def _requeue(self, job: Job, now: float) -> None:
        self._requeue_backoff(job, now)
        job.prior_gpu_seconds += job.run_gpu_seconds(now)
        job.history.append({"t": now, "event": "requeued", "run_start": job.start_time, "run_end": now})
        job.restart_count += 1
        job.state, job.final_state, job.kill_deadline = JobState.PENDING, None, None
        job.start_time = job.end_time = None
        job.slices, job.runs = (), {}
        job.exit_code = job.exit_signal = 0
        job.reason, job.reason_detail = "None", ""
        self.views.forget(job.id)
        self.views.pending_view(self, job, now)
        self._touch(job)

    def _requeue_backoff(self, job: Job, now: float) -> None:
        preemptions = sum(1 for h in job.history if h.get("event") == "preempted")
        preempted_now = any(h.get("event") == "preempted" and h["t"] >= (job.start_time or now)
                            for h in job.history[-3:])
        if preempted_now and preemptions >= 2:
            delay = min(self.config.requeue_backoff_max_s, self.config.requeue_backoff_s * 2 ** (preemptions - 2))
            job.eligible_at = now + delay
            self.deadlines.push_eligible(job)

    def _finish(self, job: Job, now: float, state: JobState) -> None:
        job.state, job.end_time, job.kill_deadline = state, now, None
        if state is JobState.CANCELLED and job.start_time is None:
            job.exit_code, job.exit_signal = 0, 0
        else:
            job.exit_code, job.exit_signal = fold_exit(job)
        job.estimated_start = None
        self._touch(job)
        self.views.forget(job.id)
        self.claims.pop(job.id, None)
        self.ended[job.id] = (state, job.start_time is not None)
        del self.jobs[job.id]

    # ----- reservations

    def add_reservation(self, spec: ReservationSpec, now: float) -> Reservation:
        record = self.reservations.add(spec, self.nodes.values(), now)
        self.meta_dirty.add("reservations")
        return record

    def remove_reservation(self, name: str) -> None:
        self.reservations.remove(name)
        self.meta_dirty.add("reservations")

