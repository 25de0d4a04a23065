"""sbatch: submit a batch script to corral's controller as Slurm 22.05's sbatch does.

stdout carries exactly `Submitted batch job N` (or `N` with --parsable) and nothing else: clients
parse it (submitit searches `job (\\d+)`, snakemake wants `^\\d+$`). Warnings go to stderr."""
from __future__ import annotations

import os
import sys
import time
from _collections_abc import Mapping, Sequence
from io import TextIOBase as TextIO  # typing.TextIO would import `typing`: start-up time

from corral.slurm.common import states
from corral.slurm.common.command import Result, action_text, connect, emit, run
from corral.slurm.common.http import ApiError, Controller
from corral.slurm.common.target import current_user
from corral.slurm.common.workdir import resolve_workdir, workdir_problem
from corral.slurm.sbatch.export import job_environment
from corral.slurm.sbatch.opts import (
    SbatchOptions,
    ScriptSource,
    apply_script,
    invalid_partition,
    parse_sbatch,
    submitted_line,
)
from corral.slurm.sbatch.values import fail, rejected

USAGE = """\
Usage: sbatch [-N nnodes] [-n ntasks] [-c ncpus] [-p partition] [--hold] [--parsable] [-t minutes]
              [-D path] [--output file] [--error file] [--chdir=directory] [-J jobname]
              [--mem=MB] [--account=name] [--dependency=type:jobid] [--comment=name] [--wait]
              [--requeue[=expedite]] [--no-requeue] [--ntasks-per-node=n] [--qos=qos] [--gres=list]
              [--reservation=name] [--array=index_values] [--export[=names]] [--gpus=n]
              [--gpus-per-node=n] [--gpus-per-task=n] [--mem-per-gpu=MB] [--mem-per-cpu=MB]
              [--signal=[B:]num[@time]] [--open-mode=append|truncate] [--wrap=command]
              executable [args...]
"""
# Settings sbatch's options make that JobSubmit has no field for yet: honouring them is not possible,
# and dropping them silently would run the job somewhere or sometime the user excluded.
NOT_IN_API = {"input": "--input"}
WAIT_POLL_MAX_S = 2.0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("sbatch", lambda: sbatch(args, os.environ, sys.stdin))


def sbatch(argv: Sequence[str], env: Mapping[str, str], stdin: TextIO) -> Result:
    options, source = parse_sbatch(argv, env)
    if options.action:
        return action_text("sbatch", options.action, USAGE)
    text = read_script(source, stdin)
    options = apply_script(options, text, os.path.basename(source.path or "") if source.kind == "file" else "stdin")
    if options.test_only:
        raise fail("--test-only is not supported by corral: the controller has no dry-run submission", 1)
    body, warnings = submission(options, source, text, env, os.getcwd())
    controller = connect(env)
    job_id, task_ids = submit(controller, body)
    warnings_text = "" if options.quiet else "".join(warnings)
    line = "" if options.quiet else submitted_line(job_id, parsable=options.parsable)
    if not options.wait:
        return line, warnings_text, 0
    emit(line, warnings_text)  # before waiting: the caller learns the id at once, as with Slurm
    return "", "", wait_for(controller, task_ids or [job_id])


def read_script(source: ScriptSource, stdin: TextIO) -> str:
    if source.kind == "wrap":
        return source.text or ""
    if source.kind == "stdin":
        return stdin.read()
    try:
        with open(source.path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        raise fail(f"Unable to open file {source.path}", 1) from None


def submission(options: SbatchOptions, source: ScriptSource, text: str, env: Mapping[str, str],
               cwd: str) -> tuple[dict, list[str]]:
    """The JobSubmit body, and warnings for stderr."""
    fields = dict(options.submit)
    warnings = list(options.warnings)
    for key, option in NOT_IN_API.items():
        if key in fields and not (key == "input" and fields[key] == "/dev/null"):
            raise fail(f"{option} is not supported by corral yet: its API has no such job setting", 1)
    fields.pop("input", None)
    if "begin" in fields:
        fields["begin_time"] = begin_time(str(fields.pop("begin")))
    export = fields.pop("export", None)
    program = {"script": text, "script_args": list(source.args)} if source.args else {"script": text}
    body = batch_job(fields, program, export, env, cwd, default_name(source))
    problem = workdir_problem(body["workdir"])
    if problem is not None:
        raise fail(problem, 1)
    return body, warnings


def batch_job(fields: Mapping[str, object], program: Mapping[str, object], export: str | None,
              env: Mapping[str, str], cwd: str, default_name: str) -> dict:
    """A batch job's JobSubmit body, from sbatch or `corral submit` alike: `fields` from the options,
    `program` what runs (script and script_args, or argv). What runs, runs once, on the job's first
    node, with Slurm's batch environment (`batch`); its srun lines start the tasks. The job gets the
    submitter's environment as --export says, and a relative --chdir is relative to `cwd`."""
    body = {**fields, **program, "batch": True}
    body["workdir"] = resolve_workdir(str(body.get("workdir", ".")), cwd)
    body.setdefault("name", default_name)
    body.update(env=job_environment(export, env), user=current_user(env), uid=os.getuid(),
                submit_host=os.uname().nodename)
    return body


def begin_time(text: str) -> float:
    """--begin's time, as Slurm reads it (now+1hour, 16:00, 2026-12-01T08:00, tomorrow...)."""
    from corral.limits import TIME_MAX_S
    from corral.slurm.common.errors import SlurmCommandError
    from corral.slurm.common.timespec import parse_time

    try:
        moment = parse_time(text, time.time())
    except SlurmCommandError:
        moment = None
    if moment is None or not 0 <= moment <= TIME_MAX_S:
        raise SlurmCommandError(f"Invalid time specification (pos=0): {text}\n"
                                f"sbatch: error: Invalid --begin specification\n", 255) from None
    return moment


def default_name(source: ScriptSource) -> str:
    """Slurm's job name when -J is not given: the script's file name, `wrap`, or `sbatch` (stdin)."""
    if source.kind == "file":
        return os.path.basename(source.path or "") or "sbatch"
    return "wrap" if source.kind == "wrap" else "sbatch"


def submit(controller: Controller, body: dict) -> tuple[int, list[int]]:
    try:
        reply = controller.submit(body)
    except ApiError as exc:
        if exc.status == 422:
            raise refusal(exc.detail, body) from None
        if exc.status == 403:  # slurmctld's ESLURM_ACCESS_DENIED, then corral's precise reason
            error = rejected("Access/permission denied")
            error.stderr += f"sbatch: error: ({exc.detail.removeprefix('Access/permission denied: ')})\n"
            raise error from None
        raise
    return int(reply["job_id"]), [int(i) for i in reply.get("task_ids") or ()]


# The controller's refusals (corral.engine.admission) -> what slurmctld says for the same problem.
_SLURM_REFUSALS = (
    ("requested time limit", "Requested time limit is invalid (missing or exceeds some limit)"),
    ("requested node configuration is not available", "Requested node configuration is not available"),
    ("invalid qos specification", "Invalid qos specification"),
    ("invalid account", "Invalid account or account/partition combination specified"),
    ("user ", "Invalid account or account/partition combination specified"),
)


def refusal(detail: str, body: Mapping) -> Exception:
    if detail.startswith("invalid partition name specified"):
        return invalid_partition(str(body.get("partition")))
    slurm_text = next((text for prefix, text in _SLURM_REFUSALS if detail.startswith(prefix)), None)
    if slurm_text is None:
        return rejected(detail)
    error = rejected(slurm_text)
    error.stderr += f"sbatch: error: ({detail})\n"  # corral's reason is more precise than Slurm's
    return error


def wait_for(controller: Controller, job_ids: Sequence[int]) -> int:
    """--wait: poll until every job has ended; the exit status is the highest of theirs, a job
    killed by a signal counting as 128 + the signal, as a shell reports it."""
    delay_s, worst = 0.1, 0
    for job_id in job_ids:
        while True:
            job = controller.job(job_id)
            if states.job_state(job) not in states.ACTIVE_STATES:
                break
            time.sleep(delay_s)
            delay_s = min(WAIT_POLL_MAX_S, delay_s * 2)
        signal = int(job.get("exit_signal") or 0)
        worst = max(worst, 128 + signal if signal else int(job.get("exit_code") or 0))
    return worst
