"""`scontrol requeue|hold|release <job_list>`: one controller call per job, Slurm's messages on failure.

Slurm prints `<reason> for job <id>` per failed id (and, for hold and release, a last
`slurm_suspend error: <reason>`), nothing on success, and exits 1 if any id failed. Ids may be
`N`, an array's `A` (every task), `A_i` (one task) or `A_[i-j,k]`, comma-separated or as separate arguments."""
from __future__ import annotations

from corral.jobref import JobIdError, parse_job_ref, split_job_list
from corral.slurm.common.command import Result, array_siblings
from corral.slurm.common.http import ApiError, Controller
from corral.slurm.scontrol.opts import ScontrolCommand

INVALID_JOB_ID = "Invalid job id specified"
# The controller's 409 details (corral.engine.engine, corral.controller.app) -> slurm_strerror's text.
_SLURM_REASONS = (
    ("only batch jobs can be requeued", "Only batch jobs are accepted or processed"),
    ("submitted with --no-requeue", "Requested operation is presently disabled"),
    ("is PENDING: only a running job", "Job is pending execution"),
    ("already finished", "Job has already finished"),
    ("only a pending job can be held or released", "Job is no longer pending execution"),
)


def slurm_reason(exc: ApiError, action: str = "") -> str:
    if exc.status == 404:
        return INVALID_JOB_ID
    if exc.status == 403:  # slurmctld's texts (slurm-compat.md §8): requeue differs from the others
        return "Access/permission denied" if action == "requeue" else "Invalid user id"
    return next((text for marker, text in _SLURM_REASONS if marker in exc.detail), exc.detail)


def job_actions(command: ScontrolCommand, controller: Controller) -> Result:
    if command.keyword == "requeue":
        # A job requeues itself this way (submitit, Lightning): the kill of its processes, this one
        # included, may arrive before the reply; scontrol must still finish and report success.
        import _signal

        _signal.signal(_signal.SIGTERM, _signal.SIG_IGN)
    items = [item for arg in command.args for item in split_job_list(arg)]
    reasons: list[tuple[str, str]] = []  # (id as written, why it failed)
    for item in items:
        failure = act_on(controller, command.keyword, item)
        if failure is not None:
            reasons.append((item, slurm_reason(failure, command.keyword)))
    lines = [f"{reason} for job {item}\n" for item, reason in reasons]
    if reasons and command.keyword in ("hold", "release"):
        lines.append(f"slurm_suspend error: {reasons[-1][1]}\n")
    return "", "".join(command.warnings) + ("" if command.quiet else "".join(lines)), 1 if reasons else 0


def act_on(controller: Controller, action: str, item: str) -> ApiError | None:
    """Do `action` to every job `item` names; the refusal to report, if all of them refused.
    (An array's finished tasks cannot be held, but its pending ones can: that is a success.)"""
    try:
        job_ids = resolve(controller, item)
    except ApiError as exc:
        if exc.status not in (403, 404, 409):
            raise
        return exc
    refusals = []
    for job_id in job_ids:
        try:
            controller.act(job_id, action)
        except ApiError as exc:
            if exc.status not in (403, 404, 409):
                raise
            refusals.append(exc)
    return refusals[-1] if refusals and len(refusals) == len(job_ids) else None


def resolve(controller: Controller, item: str) -> list[int]:
    """`N`, `A`, `A_i` or `A_[i-j,k]` -> the ids of corral's job records (every array task has its own)."""
    try:
        ref = parse_job_ref(item, task_lists=True)
    except JobIdError:
        raise ApiError(404, INVALID_JOB_ID) from None
    job = controller.job(ref.job_id)
    if job.get("array_job_id") != job["id"]:
        if ref.tasks is not None:
            raise ApiError(404, INVALID_JOB_ID)
        return [job["id"]]
    tasks = array_siblings(controller, job)
    if ref.tasks is not None:
        tasks = [t for t in tasks if ref.has_task(t.get("array_task_id"))]
        if not tasks:
            raise ApiError(404, INVALID_JOB_ID)
    return [t["id"] for t in sorted(tasks, key=lambda t: t["id"])]
