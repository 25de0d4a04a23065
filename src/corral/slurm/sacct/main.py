"""sacct: the controller's accounting records in Slurm 22.05's sacct layout.

Which jobs, as sacct decides: with -j, those jobs whenever they ran, whoever owns them; without,
the caller's own jobs (all users' with -a, the named ones with -u) that existed between -S
(default: midnight today) and -E (default: now)."""
from __future__ import annotations

import os
import sys
import time
from _collections_abc import Iterator, Mapping, Sequence

from corral import hostlist
from corral.slurm.common import states
from corral.slurm.common.command import Result, action_text, connect, run
from corral.slurm.common.http import JOB_LINE_FIELDS, Controller
from corral.slurm.common.target import current_user
from corral.slurm.sacct.opts import SacctOptions, parse_sacct
from corral.slurm.sacct.output import sacct_output_of_pages
from corral.slurm.sacct.reads import fields_for

TYPE_CHECKING = False  # typing itself is too slow to import on the commands' start-up path
if TYPE_CHECKING:
    from typing import Any

USAGE = """\
Usage: sacct [-a] [-A accounts] [-b] [-D] [-E time] [-j jobs] [-l] [-n] [-N nodes] [-o fields]
             [-p] [-P] [-r partitions] [-s states] [-S time] [-u users] [-X] [--delimiter=c]
             [--name=names] [-q qos]
"""
# What sacct's fields read of a job: every field of a job's line, its steps (rows of their own, and the job
# row's sampled fields combine theirs) and its usage; not its history (a test keeps this true).
SACCT_FIELDS = (*JOB_LINE_FIELDS, "steps", "usage")
HELP_FORMAT_NOTE = "corral's sacct fields are Slurm 22.05's; see `sacct -o help` on a Slurm cluster\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("sacct", lambda: sacct(args, os.environ))


def sacct(argv: Sequence[str], env: Mapping[str, str]) -> Result:
    options = parse_sacct(argv, env)
    if options.action == "helpformat":
        return HELP_FORMAT_NOTE, "", 0
    if options.action:
        return action_text("sacct", options.action, USAGE)
    now = time.time()
    user = current_user(env)
    controller = connect(env)
    # The cluster's name costs a round trip: only the Cluster field needs it.
    wants_cluster = any(c.field.name == "Cluster" for c in options.layout.columns)
    cluster = controller.health().get("cluster", "corral") if wants_cluster else "corral"
    pages = fetch_pages(controller, options, now, user)
    if options.nodes:
        pages = (_on_nodes(page, options.nodes) for page in pages)
    return sacct_output_of_pages(options, pages, now, cluster=cluster, user=user)


def fetch_pages(controller: Controller, options: SacctOptions, now: float, user: str) -> Iterator[list[dict]]:
    """The jobs sacct may print, a page at a time (the controller builds the next while sacct writes this
    one's lines), with the fields of SACCT_FIELDS its format reads (sacct/reads.py): the controller builds
    no whole record per job (a day of a million jobs, 43,000 of them, took 20 s that way) and projects and
    sends only those fields (the default format reads 21 of the 68)."""
    fields = fields_for(options.layout, SACCT_FIELDS, nodes=options.nodes is not None)
    if options.job_ids is not None:
        # The controller reads an array's id as every task of it, as sacct does; select_jobs then keeps
        # the tasks the ids name.
        ids = sorted({ref.job_id for ref in options.job_ids})
        return controller.accounting_pages(ids=ids, fields=fields) if ids else iter(())
    from corral.slurm.common.timespec import parse_time  # only a window needs the parser

    today = time.localtime(now)
    since = (parse_time(options.start_text, now) if options.start_text
             else time.mktime((today.tm_year, today.tm_mon, today.tm_mday, 0, 0, 0, 0, 0, -1)))
    until = parse_time(options.end_text, now) if options.end_text else now
    users = options.users if options.users is not None else (None if options.all_users else (user,))
    return controller.accounting_pages(since=since, until=until, fields=fields,
                                       **server_filters(options, users))


def server_filters(options: SacctOptions, users: Sequence[str] | None) -> dict[str, Any]:
    """What the controller can filter (select_jobs filters everything again). Each filter keeps or
    drops an array's pending tasks together, so the controller combines them as sacct would."""
    filters: dict[str, Any] = {"combine_arrays": True}
    if users and not any(name.isdigit() for name in users):  # a uid is matched here only
        filters["user"] = users
    if options.job_states is not None and options.job_states & states.CORRAL_STATES:
        filters["states"] = sorted(options.job_states & states.CORRAL_STATES)
    for key, values in (("partitions", options.partitions), ("accounts", options.accounts)):
        if values:
            filters[key] = values
    return filters


def _on_nodes(jobs: list[dict], expression: str) -> list[dict]:
    wanted = set(hostlist.expand(expression))
    return [j for j in jobs if wanted & set(hostlist.expand(j.get("nodelist") or ""))]
