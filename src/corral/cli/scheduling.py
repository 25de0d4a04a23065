"""`corral requeue`, `hold`, `release` (scontrol's job actions) and the scheduler's policy views:
`corral prio` (sprio), `share` (sshare), `queues` (the quota queues)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated

import typer

from corral.cli import render, render_tenancy
from corral.cli.client import Client, ClientError
from corral.cli.connect import open_client
from corral.cli.job_refs import JobRefsArgument, jobs_named
from corral.cli.jobs import UrlOption
from corral.cli.output import print_json, print_table, reported_errors, warn
from corral.jobref import JobRef

ApiJsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (the API's objects).")]
# Refusals that concern one job; the others are still acted on.
_PER_JOB_STATUSES = frozenset({404, 409})


def requeue(job_ids: JobRefsArgument, url: UrlOption = None) -> None:
    """Put running or finished jobs back in the queue, keeping their ids (scontrol requeue)."""
    _act_on_jobs(job_ids, url, Client.requeue, "Requeued")


def hold(job_ids: JobRefsArgument, url: UrlOption = None) -> None:
    """Keep pending jobs from starting until released (scontrol hold)."""
    _act_on_jobs(job_ids, url, Client.hold, "Held")


def release(job_ids: JobRefsArgument, url: UrlOption = None) -> None:
    """Let held jobs start again (scontrol release)."""
    _act_on_jobs(job_ids, url, Client.release, "Released")


def _act_on_jobs(refs: Sequence[JobRef], url: str | None, action: Callable[[Client, int], dict], done: str) -> None:
    """Apply `action` to every job each id names; an id naming no job, or whose every job refuses (its
    state forbids it), is reported and the rest are still done, with exit status 1 at the end. (An
    array's finished tasks cannot be held while its pending ones can: that is a success, as scontrol.)"""
    failed = 0
    with reported_errors(), open_client(url) as client:
        for ref in refs:
            jobs = jobs_named(client, ref)
            if not jobs:
                failed += 1
                typer.echo(f"corral: error: job {ref} not found", err=True)
                continue
            refusals = []
            for job in jobs:
                try:
                    changed = action(client, job["id"])
                except ClientError as exc:
                    if exc.status not in _PER_JOB_STATUSES:
                        raise
                    refusals.append(f"job {render.job_id_text(job)}: {exc}")
                    continue
                typer.echo(f"{done} job {render.job_id_text(changed)} ({changed['state']})")
            if len(refusals) == len(jobs):
                failed += 1
                for refusal in refusals:
                    typer.echo(f"corral: error: {refusal}", err=True)
            else:
                for refusal in refusals:
                    warn(refusal)
    if failed:
        raise typer.Exit(1)


def prio(json_output: ApiJsonOption = False, url: UrlOption = None) -> None:
    """Pending jobs' priorities and their weighted factors, highest first (sprio)."""
    with reported_errors(), open_client(url) as client:
        items = client.priority()
    if json_output:
        print_json(items)
        return
    print_table(render_tenancy.PRIO_HEADERS, render_tenancy.prio_rows(items), render_tenancy.PRIO_RIGHT)


def share(json_output: ApiJsonOption = False, url: UrlOption = None) -> None:
    """Each account's shares, decayed usage and fair-share factor (sshare)."""
    with reported_errors(), open_client(url) as client:
        items = client.fairshare()
    if json_output:
        print_json(items)
        return
    print_table(render_tenancy.SHARE_HEADERS, render_tenancy.share_rows(items), render_tenancy.SHARE_RIGHT)


def queues(json_output: ApiJsonOption = False, url: UrlOption = None) -> None:
    """Quota queues: nominal quota, usage, whether borrowing from the cohort, pending and running jobs."""
    with reported_errors(), open_client(url) as client:
        items = client.queues()
    if json_output:
        print_json(items)
        return
    print_table(render_tenancy.QUEUES_HEADERS, render_tenancy.queue_rows(items), render_tenancy.QUEUES_RIGHT)
