"""scancel: cancel jobs on corral's controller, with Slurm 22.05's exit rules.

Without --signal or filters an unknown or finished id is skipped silently (exit 0: submitit calls
scancel with check_call); with a filter it is `Kill job error on job id N: ...` and exit 1. The
controller records who cancelled (the caller's uid): sacct shows `CANCELLED by <uid>`."""
from __future__ import annotations

import os
import sys
from _collections_abc import Mapping, Sequence

from corral.slurm.common.command import Result, action_text, connect, run
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.http import ApiError
from corral.slurm.common.target import current_user
from corral.slurm.scancel.opts import ScancelOptions, kill_job_error, parse_scancel
from corral.slurm.scancel.targets import select_targets

USAGE = """\
Usage: scancel [-A account] [--batch] [--full] [--interactive] [-n job_name]
               [-p partition] [-Q] [-q qos] [-R reservation] [-s signal | integer]
               [-t PENDING | RUNNING | SUSPENDED] [--usage] [-u user_name]
               [--hurry] [-V] [-v] [-w hosts...] [--wckey=wckey] [--me] [job_id[_array_id][.step_id]]
"""


# What Slurm 22.05's scancel exits with after a job it may not kill (../shared/reference/slurm-compat.md §8).
ACCESS_DENIED_EXIT = 210


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("scancel", lambda: scancel(args, os.environ))


def scancel(argv: Sequence[str], env: Mapping[str, str]) -> Result:
    options = parse_scancel(argv, env)
    if options.action:
        return action_text("scancel", options.action, USAGE)
    check_supported(options)
    controller = connect(env)
    targets, stderr, code = select_targets(options, controller.jobs(), current_user(env))
    uid = os.getuid()
    done: set[int] = set()
    for ref, job in targets:
        if job["id"] in done:
            continue
        done.add(job["id"])
        if options.verbose:
            stderr += f"scancel: Terminating job {job['id']}\n"
        try:
            if options.signal is not None:
                scope = "full" if options.full else "batch" if options.batch else "steps"
                controller.signal(job["id"], options.signal, scope, uid=uid)
            else:
                controller.act(job["id"], "cancel", uid=uid)
        except ApiError as exc:
            if exc.status == 403:  # as slurmctld: ESLURM_ACCESS_DENIED, and scancel's exit status for it
                stderr += kill_job_error(ref.text if ref else str(job["id"]), "Access/permission denied")
                code = ACCESS_DENIED_EXIT
                continue
            if exc.status not in (404, 409):
                raise
            if options.strict:  # it ended since we listed it: what scancel says for a finished job
                stderr += kill_job_error(ref.text if ref else str(job["id"]))
                code = max(code, 1)
    if options.quiet:  # -Q: no messages about jobs that are gone
        stderr = "".join(line + "\n" for line in stderr.splitlines() if "Kill job error" not in line)
    return "", stderr, code


def check_supported(options: ScancelOptions) -> None:
    """What the API cannot do yet stops here with an error naming it, rather than doing something else."""
    for ref in options.jobs:
        if ref.step is not None and ref.step != "batch":
            raise SlurmCommandError(f"scancel: error: job steps are not supported by corral yet: {ref.text}\n", 1)
