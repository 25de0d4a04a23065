"""salloc: get an allocation, run a command (default: the user's shell) on this host inside it, and give
the allocation back when the command ends, as Slurm 22.05's salloc does. The command sees the
allocation's SLURM_* variables, so `srun` inside it starts steps on the allocated nodes. Where the
cluster's config has `launch_parameters = ["use_interactive_step"]` (Slurm's LaunchParameters), salloc
without a command runs the shell as a step on the first allocated node instead, on a pseudo-terminal."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

from corral.slurm.common.command import Result, action_text, connect, run
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import NO_ARG, Opt
from corral.slurm.common.http import ApiError, Unreachable
from corral.slurm.common.optable import CommandSpec
from corral.slurm.common.workdir import resolve_workdir, workdir_problem
from corral.slurm.srun.main import (
    _allocate,
    _end_allocation,
    _wait_until_running,
    _warn,
    allocation_body,
)
from corral.slurm.srun.opts import SRUN, parse_srun

USAGE = """\
Usage: salloc [-N numnodes|[min nodes]-[max nodes]] [-n num-processors] [-c cpus-per-task] [-p partition]
              [-t minutes] [-J jobname] [-A account] [-q qos] [--gpus=n] [--gpus-per-node=n]
              [--gpus-per-task=n] [--mem=MB] [-D path] [executable [args...]]
"""
# srun's step-only options mean nothing to salloc: it launches no tasks itself.
_STEP_ONLY = {"label", "output", "error", "input", "unbuffered", "jobid", "kill-on-bad-exit", "mpi", "overlap",
              "disable-status", "quit-on-interrupt", "distribution", "export", "pty"}
SALLOC = CommandSpec(
    "salloc", tuple(o for o in SRUN.options if o.key not in _STEP_ONLY) + (Opt("no-shell", None, NO_ARG),),
    getopt_exit=255, permute=False, ignored=SRUN.ignored, unsupported=SRUN.unsupported | {"no-shell"})
WATCH_S = 2.0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("salloc", lambda: salloc(args, os.environ))


def salloc(argv: Sequence[str], env: Mapping[str, str]) -> Result:
    # salloc starts a new allocation even inside one: the caller's SLURM_* shape no defaults.
    clean = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SRUN_", "SALLOC_"))}
    options = parse_srun(argv, clean, SALLOC).replace(jobid=None)
    if options.action:
        return action_text("salloc", options.action, USAGE)
    _warn("".join(options.warnings))
    controller = connect(env)
    workdir = resolve_workdir(options.workdir, os.getcwd())
    problem = workdir_problem(workdir)
    if problem is not None:
        raise SlurmCommandError(f"salloc: error: {problem}\n", 1)
    body = allocation_body(options.replace(command=()), clean, clean, workdir)
    job_id = _allocate(controller, body, "salloc")
    code = 1
    try:
        job = _wait_until_running(controller, job_id, "salloc", quiet=options.quiet)
        _warn(f"salloc: Granted job allocation {job_id}\n")
        command = list(options.command) or [env.get("SHELL") or "/bin/sh"]
        environment = allocation_environment(job, options, env, workdir)
        if not options.command and _uses_interactive_step(controller):
            code = _interactive_step(controller, job, command[0], environment, workdir)
        else:
            code = _run_inside(controller, job, command, environment)
        return "", "", code
    finally:
        _warn(f"salloc: Relinquishing job allocation {job_id}\n")
        _end_allocation(controller, job_id, code)


def allocation_environment(job: dict, options, env: Mapping[str, str], workdir: str) -> dict[str, str]:
    """The command's environment: the caller's, plus the allocation's variables (Slurm's salloc set)."""
    from corral.agent.environment import slurm_counts

    nodes = int(job["num_nodes"])
    cpus = max((int(s.get("cpus", 0)) for s in job.get("slices") or ()), default=0)
    from corral.slurm.common.commands_dir import first_on_path, user_commands_dir
    from corral.slurm.srun.step_client import requested_variables

    out = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SRUN_"))}
    out["PATH"] = first_on_path(user_commands_dir(), env.get("PATH", os.defpath))
    out.update({
        "SLURM_JOB_ID": str(job["id"]), "SLURM_JOBID": str(job["id"]), "SLURM_JOB_NAME": job["name"],
        "SLURM_JOB_NODELIST": job["nodelist"], "SLURM_NODELIST": job["nodelist"],
        "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes), "SLURM_JOB_PARTITION": job["partition"],
        "SLURM_SUBMIT_DIR": workdir, "SLURM_SUBMIT_HOST": os.uname().nodename,
        "SLURM_JOB_CPUS_PER_NODE": slurm_counts([cpus] * nodes), "SLURM_CLUSTER_NAME": "corral",
        "SLURM_TASKS_PER_NODE": slurm_counts([int(job["tasks_per_node"])] * nodes),
        "SLURM_JOB_ACCOUNT": job.get("account") or "", "SLURM_JOB_QOS": job.get("qos") or "",
    })
    if options.ntasks is not None or options.ntasks_per_node is not None:
        out["SLURM_NTASKS"] = out["SLURM_NPROCS"] = str(job["num_tasks"])
    out.update(requested_variables(options))
    if job.get("gpus_per_node"):
        out["SLURM_GPUS_PER_NODE"] = str(job["gpus_per_node"])
    return out


def _uses_interactive_step(controller) -> bool:
    """Whether the cluster's config has Slurm's LaunchParameters=use_interactive_step (its /health says).
    The name is corral.engine.config.USE_INTERACTIVE_STEP's, written out: importing the engine's config
    would cost salloc a sixth of a second (decision 0011)."""
    return "use_interactive_step" in (controller.health().get("launch_parameters") or ())


def _interactive_step(controller, job: dict, shell: str, environment: dict[str, str], workdir: str) -> int:
    """The shell as a step on the allocation's first node, on a pseudo-terminal driven by this terminal: what
    Slurm's salloc runs then (`srun --interactive --preserve-env --pty $SHELL`). Without a terminal here,
    srun's error lines, and the shell runs on the node without one, as with Slurm."""
    from corral import hostlist
    from corral.slurm.srun.main import step_environment, with_terminal
    from corral.slurm.srun.opts import StepOptions
    from corral.slurm.srun.step_client import run_step, step_variables

    first = hostlist.expand(job["nodelist"])[0]
    options = with_terminal(StepOptions(command=(shell,), nodes=1, ntasks=1, nodelist=(first,), pty=True,
                                        jobid=int(job["id"]), name="interactive"))
    return run_step(controller, int(job["id"]), options,
                    step_environment(None, environment) | step_variables(options), workdir)


def _run_inside(controller, job: dict, command: list[str], environment: dict[str, str]) -> int:
    """Run the command here; if the allocation ends under it (time limit, scancel), hang it up."""
    try:
        child = subprocess.Popen(command, env=environment)
    except OSError as exc:
        _warn(f"salloc: error: {command[0]}: {exc.strerror}\n")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(controller, job["id"], child, done), daemon=True)
    watcher.start()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the command, as in Slurm
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        done.set()
    return 128 - code if code < 0 else code


def _watch(controller, job_id: int, child: subprocess.Popen, done: threading.Event) -> None:
    while not done.wait(WATCH_S):
        try:
            state = controller.job(job_id).get("state")
        except (ApiError, Unreachable):  # the controller being away is no reason to kill the user's shell
            continue
        if state not in ("RUNNING", None):
            if state == "TIMEOUT" or state == "COMPLETING":
                _warn(f"salloc: Job {job_id} has exceeded its time limit and its allocation has been revoked.\n")
            else:
                _warn(f"salloc: Job allocation {job_id} has been revoked.\n")
            child.send_signal(signal.SIGHUP)
            return
