"""sacct: the controller's accounting records in Slurm 22.05's sacct layout.

Which jobs, as sacct decides: with -j, those jobs whenever they ran, whoever owns them; without,
the caller's own jobs (all users' with -a, the named ones with -u) that existed between -S
(default: midnight today) and -E (default: now)."""
from __future__ import annotations

import os
import sys
import time
from _collections_abc import Mapping, Sequence

from corral.slurm.commands.common import Result, action_text, connect, run
from corral.slurm.http import Controller
from corral.slurm.sacct import sacct_output
from corral.slurm.sacct_opts import SacctOptions, parse_sacct
from corral.slurm.target import current_user

USAGE = """\
Usage: sacct [-a] [-A accounts] [-b] [-D] [-E time] [-j jobs] [-l] [-n] [-N nodes] [-o fields]
             [-p] [-P] [-r partitions] [-s states] [-S time] [-u users] [-X] [--delimiter=c]
             [--name=names] [-q qos]
"""
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
    jobs = fetch_jobs(controller, options, now, user)
    if options.nodes:
        jobs = _on_nodes(jobs, options.nodes)
    # The cluster's name costs a round trip: only the Cluster field needs it.
    wants_cluster = any(c.field.name == "Cluster" for c in options.layout.columns)
    cluster = controller.health().get("cluster", "corral") if wants_cluster else "corral"
    return sacct_output(options, jobs, now, cluster=cluster, user=user)


def fetch_jobs(controller: Controller, options: SacctOptions, now: float, user: str) -> list[dict]:
    if options.job_ids is not None:
        # The controller reads an array's id as every task of it, as sacct does; select_jobs then keeps
        # the tasks the ids name.
        ids = sorted({ref.job_id for ref in options.job_ids})
        return controller.accounting(ids=ids) if ids else []
    from corral.slurm.timespec import parse_time  # only a window needs the parser

    today = time.localtime(now)
    since = (parse_time(options.start_text, now) if options.start_text
             else time.mktime((today.tm_year, today.tm_mon, today.tm_mday, 0, 0, 0, 0, 0, -1)))
    until = parse_time(options.end_text, now) if options.end_text else now
    # Let the controller filter by user when there is exactly one name to filter by.
    users = options.users if options.users is not None else (None if options.all_users else (user,))
    api_user = users[0] if users and len(users) == 1 and not users[0].isdigit() else None
    return controller.accounting(user=api_user, since=since, until=until)


def _on_nodes(jobs: list[dict], expression: str) -> list[dict]:
    from corral import hostlist  # -N only: hostlist brings `re`

    wanted = set(hostlist.expand(expression))
    return [j for j in jobs if wanted & set(hostlist.expand(j.get("nodelist") or ""))]
