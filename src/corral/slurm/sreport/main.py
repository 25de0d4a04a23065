"""sreport: usage per account and user, and the cluster's utilization, over a period, from corral's
accounting, in Slurm 22.05's sreport layout."""
from __future__ import annotations

import os
import sys
import time
from _collections_abc import Mapping, Sequence

from corral.slurm.common.command import Result, action_text, connect, run
from corral.slurm.sreport import output
from corral.slurm.sreport.opts import USAGE, parse_sreport
from corral.slurm.sreport.usage import Tree, job_usage, node_tres, report_window, reported_seconds


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("sreport", lambda: sreport(args, os.environ))


def sreport(argv: Sequence[str], env: Mapping[str, str], now: float | None = None) -> Result:
    options = parse_sreport(argv)
    if options.action:
        return action_text("sreport", options.action, USAGE)
    now = time.time() if now is None else now
    window = report_window(options.start_text, options.end_text, now)
    controller = connect(env)
    jobs = controller.accounting(since=window.start, until=window.end)
    usage = [u for u in job_usage(jobs, window, now)
             if (options.users is None or u.user in options.users)]
    health = controller.health()
    seconds = reported_seconds(window, health.get("created_at"))
    capacity = {name: amount * seconds for name, amount in node_tres(controller.nodes()).items()}
    cluster = health.get("cluster", "corral")
    text = output.banner(options, window)
    if options.report == "Utilization":
        text += output.utilization(options, cluster, usage, capacity)
        return text, "".join(options.warnings), 0
    tree = Tree.of(controller.tenancy().get("accounts") or [], (u.account for u in usage))
    if options.accounts is not None:
        usage = [u for u in usage if set(tree.ancestors(u.account)) & set(options.accounts)]
    if options.report == "TopUsage":
        text += output.top_usage(options, cluster, usage, capacity, proper_name)
    else:
        text += output.account_utilization_by_user(options, cluster, usage, tree, capacity, proper_name)
    return text, "".join(options.warnings), 0


def proper_name(user: str) -> str:
    """The GECOS name, as Slurm's "Proper Name" (empty for a user this host does not know)."""
    import pwd
    try:
        return pwd.getpwnam(user).pw_gecos.split(",")[0]
    except KeyError:
        return ""
