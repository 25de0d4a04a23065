"""A job's or step's working directory, as the submitting client settles it (sbatch, srun, salloc and
`corral submit` alike): a relative --chdir is relative to the client's own working directory (Slurm's
rule), and the directory must exist and be enterable before the job is queued.

Checked here, on the submitting host, rather than by the controller: the controller may run on a host
without the users' file systems, and a job's directory is expected at the same path on every host (a
shared file system, docs/adding-a-machine.md section 6), so the submitter's view is the job's. The agent
still checks it as the job's user at launch (a node without the mount). The API refuses a relative path.
"""
from __future__ import annotations

import os


def resolve_workdir(chdir: str | None, cwd: str) -> str:
    """--chdir resolved against `cwd` (absent: `cwd` itself), normalized."""
    return os.path.normpath(os.path.join(cwd, chdir or "."))


def workdir_problem(path: str) -> str | None:
    """Why the calling user cannot run a job in `path`, or None."""
    if not os.path.exists(path):
        return f"working directory {path} does not exist"
    if not os.path.isdir(path):
        return f"working directory {path} is not a directory"
    if not os.access(path, os.X_OK):
        return f"working directory {path} is not accessible to you"
    return None
