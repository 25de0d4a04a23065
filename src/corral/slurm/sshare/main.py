"""sshare: corral's fair share per account (and its users) in Slurm 22.05's sshare layout."""
from __future__ import annotations

import os
import sys
from _collections_abc import Mapping, Sequence

from corral.slurm.common.command import Result, action_text, connect, run
from corral.slurm.common.target import current_user
from corral.slurm.sshare.opts import USAGE, parse_sshare
from corral.slurm.sshare.output import FIELDS, sshare_output, wants_run_minutes


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("sshare", lambda: sshare(args, os.environ))


def sshare(argv: Sequence[str], env: Mapping[str, str]) -> Result:
    options = parse_sshare(argv)
    if options.action == "helpformat":
        return " ".join(f.name for f in FIELDS) + "\n", "", 0
    if options.action:
        return action_text("sshare", options.action, USAGE)
    controller = connect(env)
    users = controller.tenancy().get("users") or []
    cluster = controller.health().get("cluster", "corral")
    running = [j for j in controller.jobs() if j.get("state") == "RUNNING"] if wants_run_minutes(options) else []
    return sshare_output(options, controller.fairshare(), users, current_user(env), cluster, running)

