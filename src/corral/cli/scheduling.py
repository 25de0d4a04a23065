"""`corral requeue`, `hold`, `release` (scontrol's job actions) and the scheduler's policy views:
`corral prio` (sprio), `share` (sshare), `queues` (the quota queues)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated

import typer

from corral.cli import render, render_tenancy
from corral.cli.client import Client, ClientError
from corral.cli.connect import open_client
from corral.cli.jobs import UrlOption
from corral.cli.output import print_json, print_table, reported_errors

JobIdsArgument = Annotated[list[int], typer.Argument(help="Job ids.", show_default=False)]
ApiJsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (the API's objects).")]
# Refusals that concern one job; the others are still acted on.
_PER_JOB_STATUSES = frozenset({404, 409})


def requeue(job_ids: JobIdsArgument, url: UrlOption = None) -> None:
    """Put running or finished jobs back in the queue, keeping their ids (scontrol requeue)."""
    _act_on_jobs(job_ids, url, Client.requeue, "Requeued")


def hold(job_ids: JobIdsArgument, url: UrlOption = None) -> None:
    """Keep pending jobs from starting until released (scontrol hold)."""
    _act_on_jobs(job_ids, url, Client.hold, "Held")


def release(job_ids: JobIdsArgument, url: UrlOption = None) -> None:
    """Let held jobs start again (scontrol release)."""
    _act_on_jobs(job_ids, url, Client.release, "Released")


def _act_on_jobs(job_ids: Sequence[int], url: str | None, action: Callable[[Client, int], dict], done: str) -> None:
    """Apply `action` to each job; an unknown job or one whose state forbids it is reported and the rest are
    still done, with exit status 1 at the end."""
    refused = 0
    with reported_errors(), open_client(url) as client:
        for job_id in job_ids:
            try:
                job = action(client, job_id)
            except ClientError as exc:
                if exc.status not in _PER_JOB_STATUSES:
                    raise
                refused += 1
                typer.echo(f"corral: error: job {job_id}: {exc}", err=True)
                continue
            typer.echo(f"{done} job {render.job_id_text(job)} ({job['state']})")
    if refused:
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
