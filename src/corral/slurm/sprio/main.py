"""sprio: the priority factors of corral's pending jobs in Slurm 22.05's sprio layout."""
from __future__ import annotations

import os
import sys
from _collections_abc import Mapping, Sequence

from corral.slurm.common.command import Result, action_text, connect, run
from corral.slurm.sprio.opts import USAGE, parse_sprio
from corral.slurm.sprio.output import sprio_output


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("sprio", lambda: sprio(args, os.environ))


def sprio(argv: Sequence[str], env: Mapping[str, str]) -> Result:
    options = parse_sprio(argv, env)
    if options.action:
        return action_text("sprio", options.action, USAGE)
    controller = connect(env)
    # The weights decide the default columns (and -w shows them): they live in the tenancy document.
    weights = controller.tenancy().get("priority") or {}
    priorities = [] if options.weights else controller.priority()
    return sprio_output(options, priorities, weights)
