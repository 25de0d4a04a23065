"""sstat: the live usage of running jobs' steps (what the agents sampled last), in Slurm 22.05's layout.

`-j N` shows N's running steps (its batch step only with -a; a job without a batch step shows its own
tasks as the line `N`), `-j N.S` / `-j N.batch` that step; `-j N_I` and `N_I.S` the same for task I of
array N."""
from __future__ import annotations

import os
import sys
import time
from _collections_abc import Mapping, Sequence

from corral.jobref import JobRef
from corral.slurm.common import jobids
from corral.slurm.common.command import Result, action_text, connect, run
from corral.slurm.common.http import ApiError, Controller
from corral.slurm.sstat.opts import USAGE, parse_sstat
from corral.slurm.sstat.output import HELP_FORMAT, job_key, layout, sstat_output


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
    jobs: dict[str, dict | None] = {}
    for ref in options.job_refs:
        if job_key(ref) not in jobs:
            jobs[job_key(ref)] = job_named(controller, ref)
    return sstat_output(options, jobs, time.time())


def job_named(controller: Controller, ref: JobRef) -> dict | None:
    """The record `N` or `N_I` names (the step part aside), None when there is none."""
    if ref.tasks is None:
        try:
            return controller.job(ref.job_id)
        except ApiError as exc:
            if exc.status != 404:
                raise
            return None
    found = controller.jobs(ids=[job_key(ref)], include_finished=True)
    return next((j for j in found if j.get("array_task_id") is not None and jobids.names(ref, j)), None)
