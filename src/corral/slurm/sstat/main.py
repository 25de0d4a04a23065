"""sstat: the live usage of running jobs' steps (what the agents sampled last), in Slurm 22.05's layout.

`-j N` shows N's running steps (its batch step only with -a; a job without a batch step shows its own
tasks as the line `N`), `-j N.S` / `-j N.batch` that step."""
from __future__ import annotations

import os
import sys
import time
from _collections_abc import Mapping, Sequence

from corral.slurm.common.command import Result, action_text, connect, run
from corral.slurm.common.http import ApiError
from corral.slurm.sstat.opts import USAGE, parse_sstat
from corral.slurm.sstat.output import HELP_FORMAT, job_ids, layout, sstat_output


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("sstat", lambda: sstat(args, os.environ))


def sstat(argv: Sequence[str], env: Mapping[str, str]) -> Result:
    options = parse_sstat(argv)
    if options.action == "helpformat":
        return HELP_FORMAT, "", 0
    if options.action:
        return action_text("sstat", options.action, USAGE)
    layout(options)  # a bad field list stops here, before any request
    controller = connect(env)
    jobs: dict[int, dict | None] = {}
    for job_id in job_ids(options.job_refs):
        try:
            jobs[job_id] = controller.job(job_id)
        except ApiError as exc:
            if exc.status != 404:
                raise
            jobs[job_id] = None
    return sstat_output(options, jobs, time.time())
