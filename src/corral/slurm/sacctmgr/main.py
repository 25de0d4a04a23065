"""sacctmgr, read-only: corral's tenancy document (accounts, users, QOS, limits) as Slurm 22.05's
`sacctmgr show` prints associations, QOS, accounts and users."""
from __future__ import annotations

import os
import sys
from _collections_abc import Mapping, Sequence

from corral.slurm.common.command import Result, action_text, connect, run
from corral.slurm.sacctmgr.opts import USAGE, parse_sacctmgr
from corral.slurm.sacctmgr.output import sacctmgr_output


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("sacctmgr", lambda: sacctmgr(args, os.environ))


def sacctmgr(argv: Sequence[str], env: Mapping[str, str]) -> Result:
    options = parse_sacctmgr(argv)
    if options.action:
        return action_text("sacctmgr", options.action, USAGE)
    controller = connect(env)
    cluster = controller.health().get("cluster", "corral") if options.entity == "assoc" else ""
    return sacctmgr_output(options, controller.tenancy(), cluster)
