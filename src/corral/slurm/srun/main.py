"""srun: run a parallel job step, as Slurm 22.05's srun does.

Inside an allocation (SLURM_JOB_ID in the environment, or --jobid) srun starts a step on the job's
nodes; outside one it first creates an allocation (a job that runs nothing itself), runs the step in it,
and ends the allocation with the step's exit status (`srun -N2 --gpus-per-node=1 python train.py`).
The tasks' output comes back to srun's stdout/stderr; srun's stdin goes to the tasks."""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence

from corral import hostlist
from corral.slurm.common.command import Result, action_text, connect, run
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.http import ApiError, Controller
from corral.slurm.common.target import current_user
from corral.slurm.common.workdir import resolve_workdir, workdir_problem
from corral.slurm.srun.opts import StepOptions, fail, parse_srun, resolve_layout

USAGE = """\
Usage: srun [-N nnodes] [-n ntasks] [-c ncpus] [--ntasks-per-node=n] [-w hosts] [-x hosts] [-l]
            [-o out] [-e err] [-i in] [--export=env_vars|NONE] [-D path] [-J jobname] [--jobid=id]
            [-p partition] [-t minutes] [-A account] [-q qos] [--gpus=n] [--gpus-per-node=n]
            [--gpus-per-task=n] [--mem=MB] [-K] [-u] [--mpi=none] [--pty] executable [args...]
"""
PENDING_NOTICE_AFTER_S = 0.5
POLL_MAX_S = 1.0


def main(argv: Sequence[str] | None = None, help_text: str | None = None) -> int:
    """help_text: what --help and --usage print instead of srun's (`corral run` is srun by another name)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return run("srun", lambda: srun(args, os.environ, help_text))


def srun(argv: Sequence[str], env: Mapping[str, str], help_text: str | None = None) -> Result:
    options = parse_srun(argv, env)
    if options.action in ("help", "usage") and help_text is not None:
        return help_text, "", 0
    if options.action:
        return action_text("srun", options.action, USAGE)
    if not options.command:
        raise SlurmCommandError("srun: fatal: No command given to execute.\n")
    _warn("".join(options.warnings))
    if options.pty:
        options = with_terminal(options)
    controller = connect(env)
    workdir = resolve_workdir(options.workdir, os.getcwd())
    problem = workdir_problem(workdir)
    if problem is not None:
        raise SlurmCommandError(f"srun: error: {problem}\n", 1)
    if options.jobid is not None:
        return "", "", in_allocation(controller, options, env, workdir)
    return "", "", with_new_allocation(controller, options, env, workdir)


def with_terminal(options: StepOptions) -> StepOptions:
    """--pty: task 0 alone takes srun's stdin (Slurm's --pty implies --input=0); without a terminal here,
    Slurm's error lines, and the step runs as if --pty had not been given (as Slurm's srun does)."""
    from corral.slurm.srun.terminal import terminal_problem

    problem = terminal_problem()
    if problem is not None:
        _warn(problem)
        return options.replace(pty=False)
    return options.replace(input="0")


def in_allocation(controller: Controller, options: StepOptions, env: Mapping[str, str], workdir: str) -> int:
    from corral.slurm.srun.step_client import run_step, step_variables

    if "exclusive" in options.job:
        _warn("srun: warning: --exclusive is ignored by corral for a step: steps share their job's resources\n")
    job = _running_job(controller, options.jobid)
    allocated = hostlist.expand(job.get("nodelist") or "")
    if options.exclude and allocated and set(allocated) <= set(options.exclude):
        raise fail("Hostlist is empty!  Can't run job.")  # Slurm's srun, when -x leaves no node of the job
    options, warnings = resolve_layout(options, int(job.get("num_nodes") or 1))
    _warn("".join(warnings))
    environment = step_environment(options.export, env) | step_variables(options)
    return run_step(controller, options.jobid, options, environment, workdir)


def with_new_allocation(controller: Controller, options: StepOptions, env: Mapping[str, str], workdir: str) -> int:
    from corral.slurm.srun.step_client import run_step, step_variables

    options, warnings = resolve_layout(options, None)
    _warn("".join(warnings))
    environment = step_environment(options.export, env)
    body = allocation_body(options, environment, env, workdir)
    job_id = _allocate(controller, body, "srun")
    code = 1
    try:
        _wait_until_running(controller, job_id, "srun", quiet=options.quiet)
        step_options = options.replace(jobid=job_id)
        code = run_step(controller, job_id, step_options, environment | step_variables(options), workdir,
                        wait_for_record=True)
        return code
    finally:
        _end_allocation(controller, job_id, code)


def step_environment(export: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """What srun exports to its tasks. Unlike sbatch, srun passes its SLURM_* variables on (the step's
    own values then override them on the node): `srun` inside `sbatch --ntasks-per-node=2` keeps
    SLURM_NTASKS_PER_NODE=2, as Lightning expects."""
    from corral.slurm.sbatch.export import PRIVATE_VARIABLES, job_environment

    exported = job_environment(export, env)
    exported |= {k: v for k, v in env.items() if k.startswith(("SLURM_", "SRUN_")) and k not in PRIVATE_VARIABLES}
    return exported


def allocation_body(options: StepOptions, environment: dict[str, str], env: Mapping[str, str], workdir: str) -> dict:
    body: dict = {"allocation": True, "workdir": workdir, "user": current_user(env), "uid": os.getuid(),
                  "submit_host": os.uname().nodename, "env": {k: v for k, v in environment.items()
                                                             if not k.startswith(("SLURM_", "SRUN_"))}}
    name = options.name or (os.path.basename(options.command[0]) if options.command else None)
    if name:
        body["name"] = name
    for field in ("nodes", "ntasks", "ntasks_per_node", "cpus_per_task", "gpus_per_task"):
        value = getattr(options, field)
        if value is not None:
            body[field] = value
    body.update(options.job)
    body.update(options.container)  # the allocation's container: its steps run in it
    # The job's nodes: -w is the exact list (its length the node count), -x nodes it never gets.
    if options.nodelist:
        body["nodelist"] = hostlist.compress(options.nodelist)
    if options.exclude:
        body["exclude"] = hostlist.compress(options.exclude)
    return body


def _running_job(controller: Controller, job_id: int) -> dict:
    try:
        job = controller.job(job_id)
    except ApiError as exc:
        if exc.status == 404:
            raise fail(f"Unable to confirm allocation for job {job_id}: Invalid job id specified") from None
        raise
    if job.get("state") != "RUNNING":
        raise fail(f"Unable to confirm allocation for job {job_id}: Job/step already completing or completed")
    return job


def _allocate(controller: Controller, body: dict, prog: str) -> int:
    try:
        reply = controller.submit(body)
    except ApiError as exc:
        if exc.status == 422:
            raise SlurmCommandError(f"{prog}: error: Unable to allocate resources: {exc.detail}\n") from None
        raise
    return int(reply["job_id"])


def _wait_until_running(controller: Controller, job_id: int, prog: str, quiet: bool) -> dict:
    """Poll until the allocation starts; Ctrl-C while waiting gives it back."""
    started = time.monotonic()
    delay, told = 0.02, False
    try:
        while True:
            job = controller.job(job_id)
            state = job.get("state")
            if state == "RUNNING":
                if told and not quiet:
                    _warn(f"{prog}: job {job_id} has been allocated resources\n")
                return job
            if state != "PENDING":
                raise SlurmCommandError(f"{prog}: error: Unable to allocate resources: job {job_id} is {state}"
                                 f"{': ' + job['reason'] if job.get('reason') not in (None, 'None') else ''}\n")
            if not told and time.monotonic() - started >= PENDING_NOTICE_AFTER_S and not quiet:
                reason = job.get("reason") or "None"
                _warn(f"{prog}: job {job_id} queued and waiting for resources"
                      f"{'' if reason == 'None' else f' ({reason})'}\n")
                told = True
            time.sleep(delay)
            delay = min(POLL_MAX_S, delay * 1.5)
    except KeyboardInterrupt:
        controller.act(job_id, "cancel", uid=os.getuid())
        _warn(f"{prog}: Job allocation {job_id} has been revoked.\n")
        raise SlurmCommandError("", 1) from None


def _end_allocation(controller: Controller, job_id: int, exit_code: int) -> None:
    try:
        controller.call("POST", f"/jobs/{job_id}/complete", body={"exit_code": min(exit_code, 255), "signal": 0})
    except ApiError as exc:
        if exc.status not in (404, 409):  # already over (cancelled, timed out): nothing to give back
            raise


def _warn(text: str) -> None:
    if text:
        sys.stderr.write(text)
        sys.stderr.flush()
