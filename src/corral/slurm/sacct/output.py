"""sacct as a pure function: parsed options and job records (with their steps) in, what sacct
prints and its exit status out. The command fetches the records (all users' with -j, as sacct)."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral.slurm.common import jobids, records
from corral.slurm.sacct.fields import AcctView
from corral.slurm.sacct.format import render
from corral.slurm.sacct.opts import SacctOptions
from corral.slurm.squeue.select import combine_pending_array_tasks


def select_jobs(options: SacctOptions, jobs: Sequence[Mapping], user: str | None = None) -> list[Mapping]:
    """The jobs sacct lists. Without -j, -a or -u only the caller's own (`user`), as for non-root
    users of sacct; the -S/-E window is the caller's to apply when fetching."""
    users = options.users
    if users is None and options.job_ids is None and not options.all_users and user is not None:
        users = (user,)

    def keep(job: Mapping) -> bool:
        return all((
            options.job_ids is None or any(jobids.names(ref, job) for ref in options.job_ids),
            options.job_states is None or job.get("state") in options.job_states,
            users is None or str(job.get("user")) in users or str(records.get(job, "uid")) in users,
            options.partitions is None or job.get("partition") in options.partitions,
            options.names is None or job.get("name") in options.names,
            options.accounts is None or records.get(job, "account") in options.accounts,
            options.qos is None or records.get(job, "qos") in options.qos,
        ))
    return sorted(combine_pending_array_tasks([j for j in jobs if keep(j)]), key=_order)


def _order(job: Mapping) -> tuple:
    """By submission, then by job id; an array's tasks by index, its pending remainder last.
    (Slurm lists in database order, which matches this except between jobs submitted together.)"""
    array_id = records.get(job, "array_job_id")
    task = records.get(job, "array_task_id")
    remainder = bool(records.get(job, "array_task_spec"))
    return (job.get("submit_time") or 0, array_id if array_id is not None else job["id"], remainder,
            task if task is not None else -1)


def sacct_output(options: SacctOptions, jobs: Sequence[Mapping], now: float, *, cluster: str = "corral",
                 user: str | None = None) -> tuple[str, str, int]:
    """(stdout, stderr, exit status)."""
    chosen = select_jobs(options, jobs, user)
    view = AcctView(now, options.time_format, cluster)
    return render(chosen, options.layout, view), "".join(options.warnings), 0
