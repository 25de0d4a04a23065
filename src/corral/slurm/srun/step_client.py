"""Run one job step from the client side, as srun does: open the I/O listener, ask the controller for
the step, relay the tasks' output and srun's stdin, forward signals, and report how the tasks ended in
Slurm's words (`srun: error: n1: tasks 0-1: Exited with exit code 3`)."""
from __future__ import annotations

import contextlib
import signal
import socket
import sys
import time

from corral.hostaddr import address_towards
from corral.slurm.common.http import ApiError, Controller
from corral.slurm.common.jobids import format_task_ranges
from corral.slurm.srun.opts import StepOptions, fail

STEP_POLL_S = 2.0  # how often srun asks the controller about a step whose I/O has gone quiet
DRAIN_GRACE_S = 3.0  # after the controller says the step ended, wait this long for the last exits
RECORD_WAIT_S = 5.0
CONNECT_FAILURE = "cannot connect to srun at"  # how an agent reports that it could not reach srun's listener


def _step_record(controller: Controller, job_id: int, step_id: int, wait_s: float = 0.0) -> dict | None:
    try:
        return controller.call("GET", f"/jobs/{job_id}/steps/{step_id}", {"wait_s": wait_s or None})
    except ApiError:
        return None


def io_address(controller_url: str) -> str:
    """Where the agents connect back to srun: this host's address towards the controller, else (no
    route to it yet) the address this host's name resolves to."""
    try:
        return address_towards(controller_url)
    except OSError:
        return socket.gethostbyname(socket.gethostname())


NODE_CONFIGURATION = "Requested node configuration is not available"


def step_body(options: StepOptions, environment: dict[str, str], io: tuple[str, int, str], workdir: str) -> dict:
    body: dict = {"argv": list(options.command), "workdir": workdir, "env": environment, "input": options.input,
                  "io_host": io[0], "io_port": io[1], "io_token": io[2]}
    for field in ("nodes", "ntasks", "ntasks_per_node", "gpus_per_task", "output", "error", "name"):
        value = getattr(options, field)
        if value is not None:
            body[field] = value
    if options.cpus_per_task is not None:
        body["cpus_per_task"] = options.cpus_per_task
    body.update(options.container)  # none: the step runs in its job's container, if the job has one
    if options.nodelist:
        body["nodelist"] = list(options.nodelist)
    if options.exclude:
        body["exclude"] = list(options.exclude)
    if options.job.get("constraint"):
        body["constraint"] = options.job["constraint"]
    if options.pty:
        from corral.slurm.srun.terminal import window_size

        body["pty"] = True
        body["pty_rows"], body["pty_cols"] = window_size(1)
    return body


def step_variables(options: StepOptions) -> dict[str, str]:
    """Step-wide Slurm variables srun sets itself."""
    return {"SLURM_DISTRIBUTION": "block", **requested_variables(options)}


def requested_variables(options: StepOptions) -> dict[str, str]:
    """Variables srun and salloc set only for what the user gave (presence matters to Lightning)."""
    env = {}
    if options.ntasks_per_node is not None:
        env["SLURM_NTASKS_PER_NODE"] = str(options.ntasks_per_node)
    if options.cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = str(options.cpus_per_task)
    if options.gpus_per_task is not None:
        env["SLURM_GPUS_PER_TASK"] = str(options.gpus_per_task)
    per_node = options.job.get("gpus_per_node")  # a new allocation's --gpus-per-node
    if per_node is not None:
        model = options.job.get("gpu_model")
        env["SLURM_GPUS_PER_NODE"] = f"{model}:{per_node}" if model else str(per_node)
    return env


def run_step(controller: Controller, job_id: int, options: StepOptions, environment: dict[str, str],
             workdir: str, wait_for_record: bool = False) -> int:
    """Create the step and see it through; returns srun's exit status. `wait_for_record`: also wait until
    the controller has every node's report, so that the step is accounted before its allocation ends."""
    from corral.slurm.srun.step_streams import StepStreams

    streams = StepStreams(label=options.label, stdin=_stdin(options), input=options.input,
                          advertise_host=io_address(controller.url), stdout=sys.stdout.buffer,
                          stderr=sys.stderr.buffer).start()
    try:
        body = step_body(options, environment, (streams.host, streams.port, streams.token), workdir)
        try:
            step = controller.call("POST", f"/jobs/{job_id}/steps", body=body)
        except ApiError as exc:
            if exc.status in (404, 409):
                raise fail(f"Unable to create step for job {job_id}: Job/step already completing or completed") \
                    from None
            if exc.status == 422 and exc.detail.startswith(NODE_CONFIGURATION):
                # Slurm's line, then corral's reason (which node, which feature) on its own line.
                why = exc.detail[len(NODE_CONFIGURATION):].lstrip(": ")
                raise fail(f"Unable to create step for job {job_id}: {NODE_CONFIGURATION}"
                           + (f"\nsrun: error: {why}" if why else "")) from None
            raise
        expected = {}
        first = 0
        for node, count in zip(step["nodes"], step["tasks_per_node"], strict=False):
            expected[node] = list(range(first, first + count))
            first += count
        streams.expect(expected)
        with _forwarded_signals(streams), _terminal(options, streams):
            final = _wait(controller, streams, job_id, step, options)
        if final is None and wait_for_record:
            final = _step_record(controller, job_id, step["step_id"], wait_s=RECORD_WAIT_S)
        return _report(streams, step, final, options)
    finally:
        streams.close()


def _terminal(options: StepOptions, streams):
    """srun --pty: the local terminal raw, and its size changes sent on, while the step runs."""
    if not options.pty:
        return contextlib.nullcontext()
    from corral.slurm.srun.terminal import RawTerminal

    return RawTerminal(streams.resize)


def _stdin(options: StepOptions):
    if options.input == "none":
        return None
    try:
        return sys.stdin.buffer if sys.stdin is not None and not sys.stdin.closed else None
    except (AttributeError, ValueError):
        return None


def _wait(controller: Controller, streams, job_id: int, step: dict, options: StepOptions) -> dict | None:
    """Until every task's exit is known. Returns the controller's last view of the step, if asked."""
    killed = False
    ended_at: float | None = None
    record: dict | None = None
    while not streams.wait(STEP_POLL_S):
        if options.kill_on_bad_exit and not killed and any(code or sig for code, sig in streams.exits.values()):
            streams.signal(signal.SIGKILL)
            killed = True
        record = _step_record(controller, job_id, step["step_id"])
        if record is not None and record.get("end_time") is not None:
            ended_at = ended_at or time.monotonic()
            if time.monotonic() - ended_at >= DRAIN_GRACE_S:
                return record
    return record


def _report(streams, step: dict, record: dict | None, options: StepOptions) -> int:
    """srun's closing messages and exit status: the largest exit code, 128+N for a task killed by N."""
    exits = dict(streams.exits)
    failures = dict(streams.failures) | unreached_nodes(streams, step, record)
    lines: list[str] = []
    worst = 0
    signalled = False
    first = 0
    for node, count in zip(step["nodes"], step["tasks_per_node"], strict=False):
        ranks = list(range(first, first + count))
        first += count
        if node in failures:
            lines.append(f"srun: error: {node}: task{'s' if count > 1 else ''} {format_task_ranges(ranks)}: "
                         f"{failures[node]}\n")
            worst = max(worst, 1)
            continue
        by_outcome: dict[tuple[int, int], list[int]] = {}
        for rank in ranks:
            outcome = exits.get(rank)
            if outcome is None:
                outcome = (0, signal.SIGKILL) if record is None or record.get("exit_signal") else \
                    (int(record.get("exit_code") or 0), 0)
            by_outcome.setdefault(outcome, []).append(rank)
        for (code, sig), group in sorted(by_outcome.items(), key=lambda item: item[1][0]):
            tasks = f"task{'s' if len(group) > 1 else ''} {format_task_ranges(group)}"
            if sig:
                signalled = True
                worst = max(worst, 128 + sig)
                lines.append(f"srun: error: {node}: {tasks}: {signal.strsignal(sig) or f'Signal {sig}'}\n")
            elif code:
                worst = max(worst, code)
                lines.append(f"srun: error: {node}: {tasks}: Exited with exit code {code}\n")
    if any(CONNECT_FAILURE in text for text in failures.values()):
        lines.append(f"srun: error: the nodes' agents must reach this host at {streams.host}:{streams.port}, the "
                     "address srun gives them (this host's address on its route to the controller): see "
                     "docs/adding-a-machine.md, section 7\n")
    if signalled:
        lines.append(f"srun: Force Terminated StepId={step['job_id']}.{step['step_id']}\n")
    if not options.quiet or worst:
        sys.stderr.write("".join(lines))
        sys.stderr.flush()
    return worst


def unreached_nodes(streams, step: dict, record: dict | None) -> dict[str, str]:
    """Why each node that never connected to srun could not: the step's error as its agent reported it
    (e.g. `cannot connect to srun at 127.0.0.1:40123: ...`), for a node none of whose tasks' exits came."""
    error = (record or {}).get("error") or ""
    if not error:
        return {}
    connected, exits = set(streams.connected), streams.exits
    unreached = {}
    first = 0
    for node, count in zip(step["nodes"], step["tasks_per_node"], strict=False):
        if node not in connected and not any(rank in exits for rank in range(first, first + count)):
            unreached[node] = error
        first += count
    return unreached


class _forwarded_signals:
    """SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 to srun reach the step's tasks, as with Slurm's srun."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT)

    def __init__(self, streams) -> None:
        self.streams = streams
        self.previous: dict[int, object] = {}

    def __enter__(self):
        for signum in self.SIGNALS:
            try:
                self.previous[signum] = signal.signal(signum, self._forward)
            except (ValueError, OSError):
                pass  # not the main thread, or not settable
        return self

    def _forward(self, signum: int, _frame) -> None:
        self.streams.signal(signum)

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

