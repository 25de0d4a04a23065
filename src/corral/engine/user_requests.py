"""What users ask of their jobs (cancel, signal, requeue, update, hold, steps, completing an allocation):
each handler checks the request against the job before changing anything, and then changes it through
the Lifecycle. Each returns (its reply, the commands it calls for)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from corral.engine import events as ev
from corral.engine import steps
from corral.engine.after_run import stop_towards
from corral.engine.commands import Command
from corral.engine.config import EngineConfig
from corral.engine.history import Cancelled, Completed, Held, Released, RequeueRequested, Signaled, Updated
from corral.engine.lifecycle import Lifecycle, WrongState
from corral.engine.records import REQUEUE_REQUESTED, Job, JobState, Node, NodeRun, Step

NoReply = tuple[None, list[Command]]
# The kinds `requeueable` refuses, as a requeue's refusal names them (Slurm's job_requeue refuses every job
# that is not batch: ESLURM_BATCH_ONLY, "Only batch jobs are accepted or processed").
_NOT_REQUEUEABLE = {"allocation": "an interactive allocation (salloc, or srun outside a job), whose holder would "
                                  "not come back to it", "session": "a notebook session, which would come back "
                                                                     "without its kernels' state"}


class UserRequests:
    def __init__(self, config: EngineConfig, life: Lifecycle, nodes: Mapping[str, Node]) -> None:
        """`nodes`: the engine's (read for a step's --constraint)."""
        self.config = config
        self.life = life
        self.nodes = nodes

    def cancel(self, event: ev.CancelRequested, now: float) -> NoReply:
        life = self.life
        job = life.get(event.job_id)
        job.history.append(Cancelled(now, event.uid, event.reason or None))
        if job.state is JobState.PENDING:
            life.finish(job, now, JobState.CANCELLED)
            return None, []
        if job.state is JobState.RUNNING:
            return None, life.begin_kill(job, now, JobState.CANCELLED, note=event.note)
        job.final_state = JobState.CANCELLED  # completing: cancel wins over a pending requeue
        life.touch(job)
        return None, []

    def requeue(self, event: ev.RequeueRequested, now: float) -> NoReply:
        job = self.life.get(event.job_id)
        if not job.spec.kind.requeueable:  # before --no-requeue: a session's spec says it too, and is no batch job
            raise WrongState(f"job {job.id} is {_NOT_REQUEUEABLE.get(job.spec.kind.name, job.spec.kind.name)}: "
                             "only batch jobs can be requeued")
        if not job.spec.requeue:
            raise WrongState(f"job {job.id} was submitted with --no-requeue")
        if job.state is not JobState.RUNNING:
            raise WrongState(f"job {job.id} is {job.state.value}: only a running job can be requeued")
        job.history.append(RequeueRequested(now))
        job.stop_cause = REQUEUE_REQUESTED
        return None, self.life.begin_kill(job, now, stop_towards(job.spec, REQUEUE_REQUESTED))

    def signal(self, event: ev.SignalRequested, now: float) -> NoReply:
        """Deliver a signal without ending the job (scancel --signal). Its scope, as scancel's: "steps"
        (the default: the job's tasks, not a batch shell), "batch" (the batch shell only) or "full"."""
        job = self.life.get(event.job_id)
        if job.state is not JobState.RUNNING:
            raise WrongState(f"job {job.id} is {job.state.value}: only a running job can be signaled")
        scope = event.scope
        job.history.append(Signaled(now, event.signum, scope, event.uid))
        self.life.touch(job)
        return None, self.life.signal_commands(job, event.signum, "batch" if scope == "batch" else
                                               "steps" if scope == "steps" else "all")

    def update(self, event: ev.UpdateRequested, now: float) -> tuple[Job, list[Command]]:
        """scontrol update: a job's name, comment and time limit while it is active; its priority while
        it waits. Everything is checked before anything changes."""
        job = self.life.get(event.job_id)
        spec, request = job.spec, job.spec.request
        if event.priority is not None and job.state is not JobState.PENDING:
            raise WrongState(f"job {job.id} is {job.state.value}: only a pending job's priority can change")
        if event.time_limit_s is not None:
            partition = self.config.partition(request.partition)
            cap = partition.max_time_s if partition is not None else None
            if cap is not None and event.time_limit_s > cap:
                raise WrongState(f"requested time limit {event.time_limit_s}s exceeds the maximum {cap}s of "
                                 f"partition {request.partition!r}")
            request = dataclasses.replace(request, time_limit_s=event.time_limit_s)
        changes: dict[str, Any] = {k: v for k, v in (("name", event.name), ("comment", event.comment),
                                                     ("priority", event.priority)) if v is not None}
        job.spec = dataclasses.replace(spec, request=request, **changes)
        if event.time_limit_s is not None:
            changes["time_limit_s"] = event.time_limit_s
        job.history.append(Updated(now, **changes))
        if job.state is JobState.PENDING:
            self.life.reprioritize(job, now)
        else:
            self.life.restate(job)
        self.life.touch(job)
        return job, []

    def hold(self, event: ev.HoldRequested, now: float) -> tuple[Job, list[Command]]:
        job = self.life.get(event.job_id)
        if job.state is not JobState.PENDING:
            raise WrongState(f"job {job.id} is {job.state.value}: only a pending job can be held or released")
        if job.held != event.held:  # holding a held job (or releasing a free one) changes nothing to record
            job.history.append(Held(now) if event.held else Released(now))
        job.held = event.held
        self.life.reprioritize(job, now)
        self.life.touch(job)
        return job, []

    def start_step(self, event: ev.StepRequested, now: float) -> tuple[Step, list[Command]]:
        job = self.life.get(event.job_id)
        features = {name: self.nodes[name].features for name in job.node_names if name in self.nodes}
        step, commands = steps.start_step(job, event.request, now, features)
        self.life.touch(job)
        return step, commands

    def complete(self, event: ev.AllocationCompleted, now: float) -> NoReply:
        """An allocation's holder (salloc, or srun outside a job) is done with it."""
        job = self.life.get(event.job_id)
        if not job.spec.kind.completed_by_holder:
            raise WrongState(f"job {job.id} is not an allocation (salloc): it ends when its tasks do")
        if job.state is not JobState.RUNNING:
            raise WrongState(f"job {job.id} is {job.state.value}: only a running allocation can be completed")
        job.history.append(Completed(now, event.exit_code, event.signal))
        for node in job.runs:
            job.runs[node] = NodeRun(started=True, finished=True, exit_code=event.exit_code, signal=event.signal)
        self.life.touch(job)
        return None, self.life.maybe_end(job, now)
