"""What follows a run: one pure decision, in two halves.

When a running job is stopped from outside (preempted, its node failed, the cluster stops, a user asks for
a requeue), `stop_towards` says which state the run ends in: PENDING (it will run again) or a final one.
When every process of the run is gone, `after_run` says what becomes of the job: it finishes, it is
requeued (after a backoff when it was preempted again and again), it restarts in place, or it is
rescheduled. The engine (`Lifecycle.end_run`) only carries the decision out; kinds whose runs should come
back by themselves (services) plug their restart policy in here.
"""
from __future__ import annotations

from dataclasses import dataclass

from corral.api.services import RestartPolicy
from corral.engine.outcome import final_state
from corral.engine.records import CLUSTER_STOPPED, NODE_FAILED, PREEMPTED, REQUEUE_REQUESTED, Job, JobSpec, JobState


@dataclass(frozen=True, slots=True)
class Finish:
    """The job ends in `state`."""

    state: JobState


@dataclass(frozen=True, slots=True)
class Requeue:
    """Back to PENDING with the same id; `delay_s`: not eligible again before that many seconds (None: no
    backoff, whatever eligibility it had stays)."""

    delay_s: float | None = None


@dataclass(frozen=True, slots=True)
class RestartInPlace:
    """Run again after `delay_s` (the run ended by itself: a replica that exited or failed its liveness
    probe); `streak`: its restarts in a row, this one included (CrashLoop)."""

    delay_s: float
    streak: int = 0


@dataclass(frozen=True, slots=True)
class Reschedule:
    """Run again at once, anywhere (its node is gone)."""


AfterRun = Finish | Requeue | RestartInPlace | Reschedule


@dataclass(frozen=True, slots=True)
class RequeueBackoff:
    """A job preempted again and again waits longer each time: `initial_s` after its second preemption,
    doubling, at most `max_s` (EngineConfig.requeue_backoff_s / requeue_backoff_max_s)."""

    initial_s: float
    max_s: float

    def delay_s(self, preemptions: int) -> float | None:
        if preemptions < 2:
            return None
        return min(self.max_s, self.initial_s * 2.0 ** (preemptions - 2))


@dataclass(frozen=True, slots=True)
class CrashLoop:
    """A restarting kind's backoff (Kubernetes' CrashLoopBackOff): `policy.backoff_initial_s` doubling per
    restart in a row, at most `policy.backoff_max_s`; a run that lasted `policy.reset_after_s` was healthy,
    and the row starts again. `streak`: the restarts in a row before this run."""

    policy: RestartPolicy
    streak: int = 0

    def restart(self, ran_s: float) -> RestartInPlace:
        policy = self.policy
        streak = 0 if ran_s >= policy.reset_after_s else self.streak
        delay = min(policy.backoff_max_s, policy.backoff_initial_s * 2.0 ** min(streak, 64))
        return RestartInPlace(delay, streak + 1)


def may_requeue(spec: JobSpec) -> bool:
    """Whether a run stopped by a preemption, a node failure or the cluster stopping may run again (not
    --no-requeue, and a kind that may be requeued: an allocation's holder goes away with its run)."""
    return spec.requeue and spec.kind.requeueable


def stop_towards(spec: JobSpec, cause: str, preempt_mode: str = "requeue") -> JobState:
    """The state a running job stopped for `cause` (records.STOP_CAUSES) ends in once its processes are
    gone: PENDING to run again, else the final state. `preempt_mode`: the victim's QOS's, for PREEMPTED."""
    if spec.kind.restarts:
        return JobState.PENDING  # a replica comes back, whatever stopped it (a cancel is no stop cause)
    if cause == PREEMPTED:
        # The QOS decides, then --no-requeue and the kind. As Slurm: under PreemptMode=REQUEUE slurmctld asks
        # job_requeue, which refuses a job that is not batch (ESLURM_BATCH_ONLY), and kills the job instead
        # (preempt.c, slurm_job_preempt: "preempted ... had to be killed"): a preempted salloc ends PREEMPTED,
        # since requeued it would wait for a holder that is gone. A notebook session ends likewise.
        return JobState.PENDING if preempt_mode == "requeue" and may_requeue(spec) else JobState.PREEMPTED
    if cause == REQUEUE_REQUESTED:
        return JobState.PENDING
    if cause in (NODE_FAILED, CLUSTER_STOPPED):
        return JobState.PENDING if may_requeue(spec) else JobState.NODE_FAIL
    raise ValueError(f"unknown stop cause {cause!r}")


def after_run(job: Job, backoff: RequeueBackoff, now: float = 0.0, crash_loop: CrashLoop | None = None) -> AfterRun:
    """What becomes of `job` now that every process of its run is gone (its final_state was set when it
    was stopped; None for a run that ended by itself). `crash_loop`: a restarting kind's backoff (its
    service's policy and the replica's restarts in a row)."""
    if crash_loop is not None and job.spec.kind.restarts:
        return _after_replica_run(job, now, crash_loop)
    if job.final_state is JobState.PENDING:
        return Requeue(backoff.delay_s(job.preemptions) if job.stop_cause == PREEMPTED else None)
    return Finish(final_state(job))


def _after_replica_run(job: Job, now: float, crash_loop: CrashLoop) -> AfterRun:
    """A replica: a cancel ends it; a replica stopped from outside comes back (at once and anywhere when its
    node failed; when capacity returns when preempted); one that ended by itself (exited, failed its
    liveness probe, ran out of time) is restarted after its backoff."""
    if job.final_state is JobState.CANCELLED:
        return Finish(JobState.CANCELLED)
    if job.final_state is JobState.PENDING:
        return Reschedule() if job.stop_cause == NODE_FAILED else Requeue(None)
    ran_s = now - job.start_time if job.start_time is not None else 0.0
    return crash_loop.restart(ran_s)
