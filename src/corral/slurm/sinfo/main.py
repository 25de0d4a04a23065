"""sinfo: corral's partitions and nodes in Slurm 22.05's sinfo layout."""
from __future__ import annotations

import os
import sys
import time
from _collections_abc import Mapping, Sequence

from corral.slurm.common.command import Result, action_text, connect, emit, run
from corral.slurm.sinfo.opts import parse_sinfo
from corral.slurm.sinfo.output import sinfo_output

USAGE = """\
Usage: sinfo [-adelNRrsTv] [-i seconds] [-t states] [-p partition] [-n nodes]
             [-S fields] [-o format] [--usage] [--help] [--version]
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("sinfo", lambda: sinfo(args, os.environ))


def sinfo(argv: Sequence[str], env: Mapping[str, str]) -> Result:
    options = parse_sinfo(argv, env)
    if options.action:
        return action_text("sinfo", options.action, USAGE)
    controller = connect(env)
    if options.iterate_s is None:
        return sinfo_output(options, controller.partitions(), controller.nodes(), time.time())
    while True:  # -i N: print again every N seconds until interrupted, a blank line between
        out, err, code = sinfo_output(options, controller.partitions(), controller.nodes(), time.time())
        if emit(out + "\n", err, code):
            return "", "", code
        time.sleep(options.iterate_s)
