"""squeue: the controller's jobs in Slurm 22.05's squeue layout."""
from __future__ import annotations

import os
import sys
import time
from _collections_abc import Mapping, Sequence

from corral.slurm.common import states
from corral.slurm.common.command import MIN_JOB_AGE_S, Result, action_text, connect, emit, run, still_known
from corral.slurm.common.http import JOB_LINE_FIELDS, ApiError, Controller
from corral.slurm.common.table import JobColumns
from corral.slurm.common.target import current_user
from corral.slurm.squeue import select
from corral.slurm.squeue.opts import USAGE, SqueueOptions, parse_squeue
from corral.slurm.squeue.output import squeue_output

TYPE_CHECKING = False  # typing itself is too slow to import on the commands' start-up path
if TYPE_CHECKING:
    from typing import Any


# The fields squeue's job lines, filters and sort keys read: those of a job line but what squeue never shows
# (tests/slurm/test_squeue_fields.py prints every field of the golden jobs without them), the costliest for
# the controller to compute (usage for the idle-GPU flag, GPU-seconds so far).
SQUEUE_FIELDS = tuple(name for name in JOB_LINE_FIELDS if name not in (
    "gpu_seconds", "gpu_idle_flagged", "position", "elapsed_s", "estimated_start_source"))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("squeue", lambda: squeue(args, os.environ))


def squeue(argv: Sequence[str], env: Mapping[str, str]) -> Result:
    options = parse_squeue(argv, env)
    if options.action:
        return action_text("squeue", options.action, USAGE)
    controller = connect(env)
    user = current_user(env) if options.me else None
    if options.iterate_s is None:
        return squeue_output(options, fetch_jobs(controller, options, time.time(), user), time.time(), user)
    while True:  # -i N: print again every N seconds until interrupted, a blank line between
        now = time.time()
        out, err, code = squeue_output(options, fetch_jobs(controller, options, now, user), now, user)
        if emit(out + "\n", err, code):
            return "", "", code
        time.sleep(options.iterate_s)


def fetch_jobs(controller: Controller, options: SqueueOptions, now: float,
               user: str | None = None) -> list[dict] | JobColumns:
    """What slurmctld would hold: unfinished jobs, and finished ones for MinJobAge when -t asks
    for finished states, as columns of the fields squeue reads (records with -s, which needs steps).
    One --jobs id outside that set is looked up, as squeue tells a finished job (header only) from an
    unknown one (an error). The controller filters what it can, and combines an array's pending tasks
    as squeue would; squeue_output filters everything again."""
    wanted = options.job_states
    filters = server_filters(options, user)
    fields = filters.pop("fields", None)
    if wanted is not None and wanted - states.ACTIVE_STATES:
        # Jobs that had not ended MinJobAge ago: the accounting window, rather than GET /jobs?all=true,
        # which sends the whole history.
        path, params = "/accounting", {"since": now - MIN_JOB_AGE_S}
    else:
        path, params = "/jobs", {}
    params |= {"user": filters.pop("user", None), **filters}
    if fields is None:
        jobs: list[dict] | JobColumns = controller.pages(path, params)
    else:
        jobs = controller.job_columns(path, params, fields)
    single = options.single_job_id
    if single is None:
        return jobs
    if isinstance(jobs, JobColumns):
        if single in jobs.column("id") or single in jobs.column("array_job_id"):
            return jobs
        jobs = jobs.records()
    if not any(j["id"] == single or j.get("array_job_id") == single for j in jobs):
        try:
            job = controller.job(single)
        except ApiError as exc:
            if exc.status != 404:
                raise
        else:
            if still_known(job, now):
                jobs.append(job)
    return jobs


def server_filters(options: SqueueOptions, user: str | None) -> dict[str, Any]:
    """The query that lets the controller send only what squeue shows. Each filter keeps or drops an
    array's pending tasks together (they share user, partition, account, state), so the controller
    may combine them first; except a --jobs id naming one task, and -r, which lists tasks one by one."""
    filters: dict[str, Any] = {}
    if options.job_states is not None:
        known = sorted(s for s in states.CORRAL_STATES
                       if s in options.job_states or states.FLAG_BASE.get(s) in options.job_states)
        if known:
            filters["states"] = known
    users = (user,) if options.me and user else options.users
    if users and not any(name.isdigit() for name in users):  # a uid is matched by the command only
        filters["user"] = users
    if options.job_ids is not None:
        filters["ids"] = sorted({ref.job_id for ref in options.job_ids})
    for key, values in (("partitions", options.partitions), ("accounts", options.accounts)):
        if values:
            filters[key] = values
    tasks_named = options.job_ids is not None and any(ref.tasks is not None for ref in options.job_ids)
    filters["combine_arrays"] = not options.array and not tasks_named
    if options.steps is None:  # -s shows steps, which come with whole records only
        filters["fields"] = squeue_fields(options)
    return filters


def squeue_fields(options: SqueueOptions) -> tuple[str, ...]:
    """The fields squeue's lines, sort and filters read: fewer fields cost the controller, the wire and the
    parse less (a quarter of SQUEUE_FIELDS for the default listing). SQUEUE_FIELDS when a column or sort
    key has no reads declared."""
    sorting = select.sort_reads(options.sort)
    wanted = dict.fromkeys((*select.SELECT_READS, *_filter_reads(options), *(sorting or ())))
    for column in options.format.columns:
        reads = getattr(column.field, "reads", None) if column.field is not None else ()
        if reads is None:
            return SQUEUE_FIELDS
        wanted.update(dict.fromkeys(reads))
    if sorting is None:
        return SQUEUE_FIELDS
    return tuple(name for name in SQUEUE_FIELDS if name in wanted)  # in SQUEUE_FIELDS' order, each once


def _filter_reads(options: SqueueOptions) -> list[str]:
    """The fields the filters given read (squeue_output applies them; --me is a users filter)."""
    given = {"users": options.users is not None or options.me, "names": options.names is not None,
             "partitions": options.partitions is not None, "accounts": options.accounts is not None,
             "qos": options.qos is not None, "nodes": bool(options.nodes),
             "reservation": options.reservation is not None}
    return [name for key, reads in select.FILTER_READS.items() if given[key] for name in reads]
