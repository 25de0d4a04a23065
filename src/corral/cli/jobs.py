"""`corral queue`, `show`, `cancel`, `nodes`, `acct`: reading and cancelling over the REST API."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from corral.cli import render
from corral.cli.client import Client, ClientError
from corral.cli.config import current_user
from corral.cli.connect import open_client
from corral.cli.efficiency import goodput_line
from corral.cli.job_refs import JobRefArgument, JobRefsArgument, jobs_named, names_array
from corral.cli.output import fail, print_json, print_lines, print_table, reported_errors, warn
from corral.cli.render import cancelled_line, empty_queue_text
from corral.cli.timespec import FORMS_HELP, midnight, parse_when
from corral.jobref import JobIdError, JobRef, parse_job_list
from corral.slurm.squeue.select import combine_pending_array_tasks

UrlOption = Annotated[
    str | None,
    typer.Option("--url", help="Controller URL (several controllers: all of their URLs, comma-separated; "
                 "their leader answers). Default: $CORRAL_URL, then the cluster 'corral up' "
                 "recorded, then http://127.0.0.1:6817.", show_default=False),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (the API's JobOut/NodeOut objects).")]
UserOption = Annotated[str | None, typer.Option("--user", "-u", help="Only this user's jobs.", show_default=False)]
StatesOption = Annotated[
    str | None,
    typer.Option("--states", "-t", help="Comma-separated states, e.g. PENDING,RUNNING.", show_default=False),
]


CLEAR_SCREEN = "\x1b[2J\x1b[H"  # erase the display, cursor to the top left: what clear(1) and watch(1) send


def _csv(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def queue(
    all_jobs: Annotated[bool, typer.Option("--all", "-a", help="Finished jobs too (as many as the controller "
                                           "still holds; 'corral acct' has them all).")] = False,
    user: UserOption = None,
    states: StatesOption = None,
    long_format: Annotated[bool, typer.Option("--long", "-l", help="Add ACCOUNT, QOS, QUEUE and the pending "
                                              "reason's DETAIL.")] = False,
    json_output: JsonOption = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Show it again every --interval seconds, on a "
                                        "cleared screen, until Ctrl-C.")] = False,
    interval_s: Annotated[float, typer.Option("--interval", "-n", min=0.1, metavar="SECONDS",
                                              help="Seconds between refreshes with --watch.")] = 2.0,
    url: UrlOption = None,
) -> None:
    """List pending and running jobs (squeue); --all adds finished ones. Array tasks show as ARRAYJOB_TASK,
    and an array's pending tasks share one row, ARRAYJOB_[TASKS], as squeue shows them."""
    # The table shows an array's pending tasks on one row: the controller sends them so (--json: each task).
    queue_fields = render.QUEUE_LONG_FIELDS if long_format else render.QUEUE_FIELDS
    query: dict[str, Any] = {"states": [s.upper() for s in _csv(states)], "user": user, "include_finished": all_jobs,
                             "combine_arrays": not json_output, "fields": None if json_output else queue_fields}
    filtered = bool(user or states)
    with reported_errors(), open_client(url) as client:
        if not watch:
            _print_queue(client.jobs(**query), all_jobs, filtered, long_format, json_output)
            return
        try:
            while True:
                _refresh(lambda: _print_queue(client.jobs(**query), all_jobs, filtered, long_format, json_output),
                         interval_s)
                time.sleep(interval_s)
        except KeyboardInterrupt:  # how a watch ends: success, without click's "Aborted!"
            typer.echo()  # the shell's prompt on a line of its own, after the terminal's "^C"
            raise typer.Exit(0) from None


def _refresh(show: Callable[[], None], interval_s: float) -> None:
    """One round of --watch, as watch(1) draws it: a cleared screen (on a terminal), a header, the output.
    An error is shown in its place; the next round tries again (the controller may be restarting)."""
    if sys.stdout.isatty():
        typer.echo(CLEAR_SCREEN, nl=False)
    typer.echo(f"Every {interval_s:g}s: corral queue    {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    try:
        show()
    except ClientError as exc:
        typer.echo(f"corral: error: {exc}", err=True)


def _print_queue(jobs: list[dict], all_jobs: bool, filtered: bool, long_format: bool, json_output: bool) -> None:
    if json_output:
        print_json(jobs)
        return
    if not jobs:
        typer.echo(empty_queue_text(all_jobs, filtered))
        return
    shown = combine_pending_array_tasks(jobs)  # an array's pending tasks on one row, 12_[4-9], as squeue
    if long_format:
        print_table(render.QUEUE_LONG_HEADERS, render.queue_long_rows(shown, time.time()), render.QUEUE_LONG_RIGHT,
                    state_column=render.QUEUE_LONG_STATE_COLUMN)
    else:
        print_table(render.QUEUE_HEADERS, render.queue_rows(shown, time.time()), render.QUEUE_RIGHT,
                    state_column=render.QUEUE_STATE_COLUMN)


def show(
    job_id: JobRefArgument,
    json_output: JsonOption = False,
    url: UrlOption = None,
) -> None:
    """Show every detail of one job and its history: preemptions, requeues, signals (scontrol show job).
    An array's id shows every task of the array (with --json: a list), as scontrol show job does."""
    with reported_errors(), open_client(url) as client:
        jobs = jobs_named(client, job_id)
    if not jobs:
        fail(f"job {job_id} not found")
    if json_output:
        print_json(jobs if names_array(job_id, jobs) else jobs[0])
        return
    blocks = [render.format_fields(render.job_fields(job)) + render.history_lines(job) for job in jobs]
    print_lines([line for index, block in enumerate(blocks) for line in ([""] if index else []) + block])


def cancel(job_ids: JobRefsArgument, url: UrlOption = None) -> None:
    """Cancel jobs, pending or running (scancel). An array's id cancels every task of it, N_I one task,
    N_[I-J,K] those tasks. A job that already ended is reported, not an error."""
    unknown = 0
    with reported_errors(), open_client(url) as client:
        for ref in job_ids:
            jobs = jobs_named(client, ref)
            if not jobs:
                unknown += 1
                typer.echo(f"corral: error: job {ref} not found", err=True)
                continue
            _cancel_each(client, ref, jobs)
    if unknown:
        raise typer.Exit(1)


def _cancel_each(client: Client, ref: JobRef, jobs: list[dict]) -> None:
    ended = []
    for job in jobs:
        try:
            done = client.cancel(job["id"])
        except ClientError as exc:
            if exc.status != 409:  # 409: already finished; the user's goal holds, as scancel's exit 0
                raise
            ended.append(exc)
            continue
        typer.echo(cancelled_line(done))
    if len(jobs) == 1 and ended:
        warn(f"job {ref} not cancelled: {ended[0]}")
    elif ended:
        warn(f"{len(ended)} of the {len(jobs)} jobs of {ref} had already ended")


def nodes(json_output: JsonOption = False, url: UrlOption = None) -> None:
    """List nodes with their CPUs, memory and GPUs in use (sinfo -N)."""
    with reported_errors(), open_client(url) as client:
        items = client.nodes()
    if json_output:
        print_json(items)
        return
    print_table(render.NODE_HEADERS, render.node_rows(items), render.NODE_RIGHT, state_column=1)
    unconfined = render.without_cgroups(items)
    if unconfined:
        warn(unconfined)


def acct(
    user: UserOption = None,
    all_users: Annotated[bool, typer.Option("--all-users", "-a", help="Jobs of every user.")] = False,
    since: Annotated[str | None, typer.Option("--since", "-S", metavar="TIME",
                                              help=f"Start of the window: {FORMS_HELP}. "
                                              "Default: midnight today (all time with --jobs).",
                                              show_default=False)] = None,
    until: Annotated[str | None, typer.Option("--until", "-E", help="End of the window (same forms).",
                                              metavar="TIME", show_default=False)] = None,
    states: Annotated[str | None, typer.Option("--states", "-s", help="Comma-separated states.",
                                               show_default=False)] = None,
    jobs: Annotated[str | None, typer.Option("--jobs", "-j", help="Comma-separated job ids: N (an array's id: "
                                             "every task), N_I, N_[I-J,K].", metavar="IDS",
                                             show_default=False)] = None,
    json_output: JsonOption = False,
    url: UrlOption = None,
) -> None:
    """Accounting records of finished and active jobs (sacct). As sacct: your own jobs since midnight."""
    with reported_errors():
        query = _acct_query(user, all_users, since, until, states, jobs, time.time())
        with open_client(url) as client:
            records = client.accounting(**query)
    if json_output:
        print_json(records)
        return
    print_table(render.ACCT_HEADERS, render.acct_rows(records), render.ACCT_RIGHT, state_column=2)
    goodput = goodput_line(records)
    if goodput is not None:
        typer.echo(goodput)


def _acct_query(user: str | None, all_users: bool, since: str | None, until: str | None, states: str | None,
                jobs: str | None, now: float) -> dict:
    ids = _job_ids(jobs)
    # sacct's defaults: with -j every user and all time; otherwise the caller's jobs since midnight.
    if user is None and not all_users and not ids:
        user = current_user()
    since_s = parse_when(since, now) if since else (None if ids else midnight(now))
    return {
        "user": user,
        "states": [s.upper() for s in _csv(states)],
        "since": since_s,
        "until": parse_when(until, now) if until else None,
        "ids": ids,
    }


def _job_ids(text: str | None) -> list[str]:
    """--jobs in Slurm's forms, checked here so that a bad id stops the command before any request."""
    try:
        return [ref.text for ref in parse_job_list(text or "", task_lists=True)]
    except JobIdError as exc:
        fail(f"{exc} in --jobs")
