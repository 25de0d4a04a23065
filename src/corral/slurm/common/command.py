"""What every command shares: finding the controller, printing a result, and turning failures into
Slurm-like `<prog>: error: ...` lines with exit status 1."""
from __future__ import annotations

import os
import sys
from _collections_abc import Callable, Mapping

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.http import RATE_LIMITED, ApiError, Controller, TlsRefused, Unreachable
from corral.slurm.common.leader import leader_wait_s
from corral.slurm.common.target import TargetError, resolve_target

Result = tuple[str, str, int]  # (stdout, stderr, exit status), as the pure formatters return
SLURM_VERSION = "22.05.8"  # the Slurm release whose behaviour these commands reproduce
# How long Slurm keeps a finished job in slurmctld (MinJobAge's default): squeue and scontrol show
# finished jobs this long, then forget them. corral keeps every job, so the commands apply it.
MIN_JOB_AGE_S = 300
FINISHED_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                             "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})


def run(prog: str, action: Callable[[], Result]) -> int:
    """Run one command: print what it returns, or the error that stopped it; return the exit status."""
    try:
        out, err, code = action()
    except SlurmCommandError as exc:
        out, err, code = exc.stdout, exc.stderr, exc.exit_code
    except Unreachable as exc:
        out, err, code = "", unreachable_message(prog, exc), 1
    except ApiError as exc:
        out, err, code = "", api_message(prog, exc), 1
    except TargetError as exc:
        out, err, code = "", f"{prog}: error: {exc}\n", 1
    except KeyboardInterrupt:
        return 130
    return emit(out, err, code)


def emit(out: str, err: str, code: int = 0) -> int:
    # Warnings first, as Slurm prints them while parsing, before any output.
    try:
        if err:
            sys.stderr.write(err)
            sys.stderr.flush()
        if out:
            sys.stdout.write(out)
            sys.stdout.flush()
    except BrokenPipeError:
        # `squeue | head`: the reader is gone. Point stdout at /dev/null so that the interpreter's
        # final flush does not complain, and end as a command killed by SIGPIPE would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code


def connect(env: Mapping[str, str] = os.environ) -> Controller:
    target = resolve_target(env, reuse=True)
    try:
        wait_s = leader_wait_s(env)
    except ValueError as exc:
        raise TargetError(str(exc)) from None
    return Controller(target.urls, target.secret, source=target.source, ca_file=target.ca_file,
                      leader_wait_s=wait_s, reused_from=target.reused_from)


def unreachable_message(prog: str, exc: Unreachable) -> str:
    if isinstance(exc, TlsRefused):
        return f"{prog}: error: Unable to contact slurm controller (connect failure)\n{prog}: error: {exc}\n"
    return (f"{prog}: error: Unable to contact slurm controller (connect failure)\n"
            f"{prog}: error: corral's {'controllers' if ', ' in exc.url else 'controller'} at {exc.url} "
            f"(from {exc.source or 'the caller'}) did not answer: {exc.reason}; is 'corral up' running?\n")


def api_message(prog: str, exc: ApiError) -> str:
    if exc.status == 401:
        return (f"{prog}: error: the controller refused the credential ({exc.detail}): run on a cluster host "
                "(its auth socket vouches for you), or set CORRAL_TOKEN (corral token create)\n")
    if exc.status == 403:
        return f"{prog}: error: Access/permission denied: {exc.detail.removeprefix('Access/permission denied: ')}\n"
    if exc.status == RATE_LIMITED:  # the detail begins with Slurm's text for it
        return f"{prog}: error: {exc.detail}\n"
    return f"{prog}: error: the controller answered {exc.status}: {exc.detail}\n"


def action_text(prog: str, action: str, usage: str) -> Result:
    """--help, --usage and --version, printed to stdout with exit status 0."""
    if action == "version":
        return f"slurm {SLURM_VERSION} (corral)\n", "", 0
    if action == "usage":
        return usage, "", 0
    return (f"{usage}\ncorral's {prog} takes Slurm {SLURM_VERSION}'s options. Those the controller cannot "
            "honour stop with an error naming them; hints corral has no use for are accepted with a "
            "warning.\n"), "", 0


def is_finished(job: Mapping) -> bool:
    return str(job.get("state")) in FINISHED_STATES


def still_known(job: Mapping, now: float) -> bool:
    """Whether slurmctld would still hold this job: unfinished, or finished within MinJobAge."""
    end = job.get("end_time")
    return not is_finished(job) or end is None or end >= now - MIN_JOB_AGE_S


def array_siblings(controller: Controller, job: Mapping) -> list[dict]:
    """Every task of the array `job` belongs to: the controller reads an array's id as all its tasks."""
    array_id = job.get("array_job_id")
    if array_id is None:
        return [dict(job)]
    return [j for j in controller.accounting(ids=[array_id]) if j.get("array_job_id") == array_id]
