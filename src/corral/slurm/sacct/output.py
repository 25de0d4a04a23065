"""sacct as a pure function: parsed options and job records (with their steps) in, what sacct
prints and its exit status out. The command fetches the records (all users' with -j, as sacct)."""
from __future__ import annotations

from _collections_abc import Callable, Iterable, Mapping, Sequence

from corral.slurm.common import jobids, records, states
from corral.slurm.sacct.fields import AcctView
from corral.slurm.sacct.format import header_lines, job_lines, line_writer
from corral.slurm.sacct.opts import SacctOptions
from corral.slurm.squeue.select import combine_pending_array_tasks


def select_jobs(options: SacctOptions, jobs: Sequence[Mapping], user: str | None = None) -> list[Mapping]:
    """The jobs sacct lists. Without -j, -a or -u only the caller's own (`user`), as for non-root
    users of sacct; the -S/-E window is the caller's to apply when fetching."""
    keep = _selector(options, user)
    return sorted(combine_pending_array_tasks([j for j in jobs if keep(j)]), key=_order)


def _selector(options: SacctOptions, user: str | None) -> Callable[[Mapping], bool]:
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
    return keep


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
    return sacct_output_of_pages(options, (jobs,), now, cluster=cluster, user=user)


def sacct_output_of_pages(options: SacctOptions, pages: Iterable[Sequence[Mapping]], now: float, *,
                          cluster: str = "corral", user: str | None = None) -> tuple[str, str, int]:
    """sacct_output() of the jobs of `pages` taken together, each page's lines written as it comes (the
    controller builds the next page meanwhile) and put in select_jobs' order at the end. Pending array
    tasks wait for the last page: they are printed combined, and a group's tasks may span pages."""
    keep = _selector(options, user)
    view = AcctView(now, options.time_format, cluster)
    layout = options.layout
    write, steps = line_writer(layout, view), layout.steps
    # (select_jobs' sort key, position in select_jobs' list before sorting, lines): the position keeps its
    # sort stable. A combined group takes its first task's position, as combine_pending_array_tasks puts it.
    written: list[tuple[tuple, int, str]] = []
    groups: dict[tuple, list[Mapping]] = {}
    first_seen: dict[tuple, int] = {}
    position = 0
    for page in pages:
        for job in page:
            if not keep(job):
                continue
            group = _pending_array_group(job)
            if group is None:
                written.append((_order(job), position, job_lines(job, write, steps)))
            else:
                first_seen.setdefault(group, position)
                groups.setdefault(group, []).append(job)
            position += 1
    for group, tasks in groups.items():
        written.extend((_order(job), first_seen[group], job_lines(job, write, steps))
                       for job in combine_pending_array_tasks(tasks))
    written.sort(key=lambda item: item[:2])
    head = "".join(line + "\n" for line in header_lines(layout)) if layout.header else ""
    return head + "".join(item[2] for item in written), "".join(options.warnings), 0


def _pending_array_group(job: Mapping) -> tuple | None:
    """The group combine_pending_array_tasks merges a pending array task into; None for any other job."""
    array_id = records.get(job, "array_job_id")
    if states.job_state(job) != "PENDING" or array_id is None or not records.is_array(job):
        return None
    return (array_id, job.get("name"), job.get("partition"))
