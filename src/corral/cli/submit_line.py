"""`corral submit`'s command line and job body, without Typer or httpx (corral.cli.submit runs it through
the Typer app, corral.cli.lean_commands without): sbatch, with corral's messages and options.

As sbatch, it submits a batch job: the script (or --wrap's or `-- CMD`'s command) runs once, on the
job's first node, and its srun lines start the tasks; the body is built by the Slurm sbatch's own
batch_job. `corral run` (srun) is the command that runs a command as every task.

The arguments bypass click: sbatch semantics (GNU getopt with long prefixes, options stopping at the
script, `--` before a command) come from corral.jobscript, the same parser that reads #SBATCH lines:
sbatch's own getopt and option table (corral.slurm.common.getopt, corral.slurm.sbatch.table)."""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from corral.cli.errors import CliError
from corral.jobscript import (
    SUBMIT_OPTION_TABLE,
    build_submission,
    check_script,
    parse_args,
    parse_directives,
    wrap_script,
)
from corral.jobscript.submission import COMMAND_LINE_WHERE, SBATCH_OPTIONS
from corral.slurm.common.getopt import NO_ARG, OPTIONAL, REQUIRED, Opt, ParsedOption
from corral.slurm.common.workdir import workdir_problem
from corral.slurm.sbatch import table
from corral.slurm.sbatch.main import batch_job

# sbatch's --wrap, --parsable and --help, and corral's own --json and --url.
CLI_OPTIONS = (
    table.BY_KEY["wrap"],
    Opt("json", arg=NO_ARG),
    table.BY_KEY["parsable"],
    Opt("url", arg=REQUIRED),
    table.BY_KEY["help"],
)


@dataclass(slots=True)
class SubmitCommandLine:
    sbatch_tokens: list[str] = field(default_factory=list)  # for build_submission, as written
    wrap: str | None = None
    json: bool = False
    parsable: bool = False
    url: str | None = None
    help: bool = False
    positionals: list[str] = field(default_factory=list)
    command_given: bool = False  # `-- CMD ARGS`: run a command, not a script


def split_command_line(argv: Sequence[str]) -> SubmitCommandLine:
    """Separate corral's own options from the job's; both follow the same getopt rules."""
    parsed = parse_args(argv, (*SUBMIT_OPTION_TABLE, *CLI_OPTIONS), where=COMMAND_LINE_WHERE,
                        known=SBATCH_OPTIONS)
    line = SubmitCommandLine(positionals=parsed.positionals, command_given=parsed.saw_double_dash)
    cli_names = {o.key for o in CLI_OPTIONS}
    for item in parsed.options:
        takes_value = item.option.arg != NO_ARG
        if item.option.key not in cli_names:
            line.sbatch_tokens += _job_tokens(item)
        elif takes_value:
            setattr(line, item.option.key, item.value)
        else:
            setattr(line, item.option.key, True)
    return line


def _job_tokens(item: ParsedOption) -> list[str]:
    """A job option as tokens that parse back to it: an optional value only attaches (`--requeue=expedite`)."""
    if item.option.arg == NO_ARG:
        return [item.written]
    if item.option.arg == OPTIONAL:
        if item.value is None:
            return [item.written]
        return [f"{item.written}={item.value}" if item.written.startswith("--") else item.written + item.value]
    return [item.written, item.value or ""]


@dataclass(frozen=True, slots=True)
class JobSource:
    script: str | None
    argv: list[str] | None  # the command, or the script's arguments
    default_name: str


def job_source(line: SubmitCommandLine, stdin: TextIO) -> JobSource:
    """What the job runs: --wrap, `-- CMD`, a script file, or a script on stdin (as sbatch)."""
    if line.wrap is not None:
        if line.positionals or line.command_given:
            raise CliError("--wrap cannot be combined with a script or a command")
        return JobSource(wrap_script(line.wrap), None, "wrap")
    if line.command_given:
        if not line.positionals:
            raise CliError("no command after '--'")
        return JobSource(None, list(line.positionals), os.path.basename(line.positionals[0]))
    if line.positionals:
        path, *script_args = line.positionals
        return JobSource(read_script(path), script_args, os.path.basename(path))
    if stdin.isatty():
        raise CliError("no script given: corral submit [options] SCRIPT | --wrap CMD | -- CMD [ARGS...]")
    return JobSource(stdin.read(), None, "stdin")


def read_script(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise CliError(f"cannot read script {path!r}: no such file; to run a command, put it after "
                       f"'--': corral submit [options] -- {path} ...") from None
    except UnicodeDecodeError:
        raise CliError(f"script {path!r} is not UTF-8 text") from None
    except OSError as exc:
        raise CliError(f"cannot read script {path!r}: {exc.strerror}") from None


def build_body(line: SubmitCommandLine, stdin: TextIO = sys.stdin, environ: Mapping[str, str] = os.environ,
               cwd: str | None = None) -> dict:
    """The batch job's JobSubmit body: options from the script's directives, overridden by the
    command line; the rest (batch, environment, work directory, user) as sbatch makes it."""
    source = job_source(line, stdin)
    directives: list[str] = []
    if source.script is not None:
        check_script(source.script)
        directives = parse_directives(source.script)
    fields = build_submission(directives, line.sbatch_tokens)
    if source.script is None:
        program: dict[str, object] = {"argv": source.argv}
    else:
        program = {"script": source.script}
        if source.argv:
            program["script_args"] = source.argv
    body = batch_job(fields, program, None, environ, cwd or os.getcwd(), source.default_name)
    problem = workdir_problem(body["workdir"])
    if problem is not None:
        raise CliError(problem)
    return body


USAGE = """\
Usage: corral submit [OPTIONS] SCRIPT [ARGS...]
       corral submit [OPTIONS] --wrap 'COMMAND'
       corral submit [OPTIONS] -- COMMAND [ARGS...]
       corral submit [OPTIONS] < SCRIPT

Submit a batch job, as sbatch does: the script (or COMMAND) runs ONCE, on the first node of the
job, with Slurm's batch environment (SLURM_JOB_ID, SLURM_JOB_NODELIST, ...; no per-task RANK).
The srun lines inside it start the tasks: `srun python train.py` runs one copy per task, each with
its own CUDA_VISIBLE_DEVICES, RANK, WORLD_SIZE, ... Output goes to slurm-%j.out unless -o says.
To run a command as every task now and see its output here, use 'corral run' (srun).

Options also come from the script's #SBATCH (or #CORRAL) lines; those given here win. Long options
may be abbreviated; --opt=value, --opt value, -N2 and -N 2 all work.

Job options:
  -N, --nodes N               nodes (all get the same slice of GPUs, CPUs, memory)
  -n, --ntasks N              tasks in all
      --ntasks-per-node N     tasks per node (alias --tasks-per-node)
  -G, --gpus [TYPE:]N         GPUs for the whole job
      --gpus-per-node [TYPE:]N
      --gres gpu[:TYPE][:N]   GPUs per node, Slurm style; shard[:TYPE][:N], mps[:TYPE][:P]: a GPU share
      --gpus-per-task [TYPE:]N
  -c, --cpus-per-task N
      --mem SIZE              memory per node: N (MiB) or N[K|M|G|T][B], e.g. 16G
      --mem-per-gpu SIZE
      --mem-per-cpu SIZE
  -t, --time LIMIT            M, M:S, H:M:S, D-H, D-H:M or D-H:M:S (finite)
  -p, --partition NAME
  -J, --job-name NAME
  -o, --output PATTERN        stdout file (%j %x %u %N %t %%), relative to the work dir
  -e, --error PATTERN         stderr file (default: with stdout)
  -D, --chdir DIR             work dir (default: the current directory)
      --priority N
  -A, --account NAME          account to charge (default: your default account)
  -q, --qos NAME              quality of service (default: the cluster's default QOS)
      --queue NAME            quota queue (default: the queue of the account)
      --reservation NAME      run inside this advance reservation
  -a, --array INDEXES         job array: 0-99, 1,3,5, 0-15:4, with %N for at most N at once
  -d, --dependency LIST       afterok:ID[:ID...], after, afterany, afternotok (ID: N or N_M,
                              optionally +MINUTES); joined by ',' (all) or '?' (any); or singleton
      --signal [B:]SIG[@S]    send SIG (name or number) S seconds (default 60) before the limit;
                              B: to the batch shell only
      --requeue[=expedite]    the job may be requeued (the default; a node failure requeues it);
                              =expedite: requeued after a node failure, it goes first and keeps
                              its healthy nodes (Slurm 25.11's expedited requeue)
      --no-requeue            never requeue the job, whatever happens to it (a node failure
                              ends it NODE_FAIL)
  -H, --hold                  submit held: it stays pending until 'corral release'

Submit options:
      --wrap COMMAND          the job runs COMMAND with /bin/sh (once, as a script would)
      --parsable              print only the job id (for an array: the array job id)
      --json                  print the reply as JSON
      --url URL[,URL...]      controller URL(s) (default: $CORRAL_URL, then 'corral up')
  -h, --help                  show this help
"""


