"""sattach: attach to a running job step's I/O, as Slurm 22.05's sattach does (`sattach 7.0`).

The step's nodes connect to sattach as they did to srun (corral.stepio; the controller tells their agents,
POST /jobs/{id}/steps/{step}/attach): sattach prints the tasks' output from now on (`-l` labels it),
sends its stdin to the tasks (`--input-filter=N`: task N only), and with `--pty` drives a `srun --pty`
step's terminal (raw mode, window size). It ends when the step's tasks have all ended, with the largest
exit status (128+N for a signal death), as srun; Ctrl-C, or any SIGINT/SIGTERM/SIGHUP, only detaches:
the step runs on. Only the job's owner may attach."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from corral.slurm.common.command import Result, action_text, connect, run
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import NO_ARG, REQUIRED, Opt
from corral.slurm.common.http import ApiError, Controller
from corral.slurm.common.optable import CommandSpec, check_support, parse_command_line

USAGE = "Usage: sattach [options] <jobid.stepid>\n"
SATTACH = CommandSpec("sattach", (
    Opt("error-filter", None, REQUIRED), Opt("help", "h", NO_ARG), Opt("input-filter", None, REQUIRED),
    Opt("label", "l", NO_ARG), Opt("layout", None, NO_ARG), Opt("output-filter", None, REQUIRED),
    Opt("pty", None, NO_ARG), Opt("quiet", "Q", NO_ARG), Opt("usage", "u", NO_ARG), Opt("version", "V", NO_ARG),
    Opt("verbose", "v", NO_ARG)), unsupported=frozenset({"error-filter", "output-filter", "layout"}))
STEP_POLL_S = 2.0
DRAIN_GRACE_S = 3.0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("sattach", lambda: sattach(args, os.environ))


def fail(message: str, exit_code: int = 1) -> SlurmCommandError:
    return SlurmCommandError(f"sattach: error: {message}\n", exit_code)


def sattach(argv: Sequence[str], env: Mapping[str, str]) -> Result:
    line = parse_command_line(SATTACH, argv)
    for action in ("help", "usage", "version"):
        if line.has(action):
            return action_text("sattach", action, USAGE)
    warnings = "".join(check_support(SATTACH, line))
    if len(line.positionals) != 1:
        raise SlurmCommandError(f"{warnings}sattach: error: You must specify a job step id\n{USAGE}", 1)
    job_id, step_id = _step_ref(line.positionals[0])
    input_rank = line.last("input-filter") or "all"
    if input_rank != "all" and not (input_rank.isascii() and input_rank.isdigit()):
        raise fail(f"Invalid input-filter value: {input_rank}")
    sys.stderr.write(warnings)
    controller = connect(env)
    step = _running_step(controller, job_id, step_id)
    pty = line.has("pty")
    if pty:
        from corral.slurm.srun.terminal import terminal_problem

        problem = terminal_problem()
        if problem is not None:
            sys.stderr.write(problem.replace("srun: ", "sattach: "))
            pty = False
    return "", "", attach(controller, step, label=line.has("label"), input_rank="0" if pty else input_rank,
                          pty=pty, quiet=line.has("quiet"))


def _step_ref(text: str) -> tuple[int, int]:
    job, dot, step = text.partition(".")
    if not dot or not job.isascii() or not job.isdigit() or not step.isascii() or not step.isdigit():
        raise fail(f"Invalid job step id: {text}: give it as <jobid>.<stepid> (sattach 7.0)")
    return int(job), int(step)


def _running_step(controller: Controller, job_id: int, step_id: int) -> dict:
    try:
        step = controller.call("GET", f"/jobs/{job_id}/steps/{step_id}")
    except ApiError as exc:
        if exc.status == 404:
            raise fail("Could not get job step info: Invalid job id specified") from None
        raise
    if step.get("end_time") is not None:
        raise fail("Could not get job step info: Job/step already completing or completed")
    return step


def attach(controller: Controller, step: dict, *, label: bool, input_rank: str, pty: bool, quiet: bool) -> int:
    from corral.slurm.srun.step_client import io_address
    from corral.slurm.srun.step_streams import StepStreams

    job_id, step_id = step["job_id"], step["step_id"]
    streams = StepStreams(label=label, stdin=sys.stdin.buffer, input=input_rank,
                          advertise_host=io_address(controller.url)).start()
    try:
        try:
            controller.call("POST", f"/jobs/{job_id}/steps/{step_id}/attach",
                            body={"io_host": streams.host, "io_port": streams.port, "io_token": streams.token})
        except ApiError as exc:
            if exc.status in (404, 409):
                raise fail("Could not get job step info: Job/step already completing or completed") from None
            raise
        layout, first = {}, 0
        for node, count in zip(step["nodes"], step["tasks_per_node"], strict=False):
            layout[node] = list(range(first, first + count))
            first += count
        streams.expect(layout)
        detached = False
        with _terminal(pty, streams), _detaching() as interrupted:
            while not streams.wait(STEP_POLL_S) and not interrupted:
                record = controller.call("GET", f"/jobs/{job_id}/steps/{step_id}")
                if record.get("end_time") is not None and not streams.wait(DRAIN_GRACE_S):
                    break
            detached = bool(interrupted)
        if detached:
            return 0
        return _worst(streams.exits)
    finally:
        streams.close()


def _worst(exits: dict[int, tuple[int, int]]) -> int:
    return max((128 + sig if sig else code for code, sig in exits.values()), default=0)


def _terminal(pty: bool, streams):
    if not pty:
        return contextlib.nullcontext()
    from corral.slurm.srun.terminal import RawTerminal

    return RawTerminal(streams.resize)


@contextlib.contextmanager
def _detaching():
    """SIGINT, SIGTERM and SIGHUP end sattach (the list becomes non-empty); the step runs on."""
    got: list[int] = []
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        previous[signum] = signal.signal(signum, lambda number, _frame: got.append(number))
    try:
        yield got
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
