"""squeue as a pure function: parsed options and the controller's job records in, what squeue
prints and its exit status out. The command fetches the records and writes the result."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral import hostlist
from corral.slurm.common.table import JobColumns
from corral.slurm.squeue import select
from corral.slurm.squeue.fields import View
from corral.slurm.squeue.format import render
from corral.slurm.squeue.opts import INVALID_JOB_ID, SqueueOptions


def squeue_output(options: SqueueOptions, jobs: Sequence[Mapping] | JobColumns, now: float,
                  user: str | None = None) -> tuple[str, str, int]:
    """(stdout, stderr, exit status). `jobs` are all the records the controller still holds,
    finished ones included, or their columns (computed column-wise where columnar.py can); `user` is the
    caller, for --me."""
    if isinstance(jobs, JobColumns):
        from corral.slurm.squeue.columnar import columnar_output

        answer = columnar_output(options, jobs, now, user)
        if answer is not None:
            return answer
        jobs = jobs.records()
    warnings = "".join(options.warnings)
    single = options.single_job_id
    if single is not None and not any(j["id"] == single or j.get("array_job_id") == single for j in jobs):
        return "", warnings + INVALID_JOB_ID, 1
    users = (user,) if options.me and user else options.users
    chosen = select.filter_jobs(jobs, job_ids=options.job_ids, job_states=options.job_states, users=users,
                                names=options.names, partitions=options.partitions, accounts=options.accounts,
                                qos=options.qos)
    if options.nodes:
        chosen = _on_nodes(chosen, options.nodes)
    if options.reservation is not None:
        chosen = [j for j in chosen if j.get("reservation") == options.reservation]
    # -r: one line per array task; otherwise an array's pending tasks share one `A_[..]` line.
    expand = select.expand_array_remainders if options.array else select.combine_pending_array_tasks
    chosen = expand(chosen)
    if options.steps is not None:
        from corral.slurm.squeue.steps import squeue_steps_output

        view = View(now, options.time_format)
        return squeue_steps_output(options.format, chosen, options.steps, view, not options.noheader), warnings, 0
    ordered = select.sort_jobs(chosen, options.sort)
    out = render(ordered, options.format, View(now, options.time_format), header=not options.noheader,
                 long_banner=options.long_banner)
    return out, warnings, 0


def _on_nodes(jobs: Sequence[Mapping], expression: str) -> list[Mapping]:
    wanted = set(hostlist.expand(expression))
    return [j for j in jobs if wanted & set(hostlist.expand(j.get("nodelist") or ""))]
