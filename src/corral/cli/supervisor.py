"""Child processes of `corral up`: started with their output in log files, watched, stopped in order.

Children get their own session, so a Ctrl-C in the terminal reaches only `corral up`, which then
stops agents before the controller (agents report their jobs' ends while the controller still
listens). On Linux each child also gets PR_SET_PDEATHSIG, so none outlives a `corral up` that is
killed outright: the kernel sends them SIGTERM, and the agents (--kill-tasks-on-exit) kill their
jobs' tasks before they exit.

A child that may be restarted (a controller of several: the others lead meanwhile) is started again when
it dies, as systemd's Restart=always would, at most RESTARTS_MAX times in RESTART_WINDOW_S; past that, or
for any other child, its death stops the cluster."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from corral.cli.errors import CliError

LOG_TAIL_LINES = 20
RESTARTS_MAX = 5
RESTART_WINDOW_S = 60.0


class ChildExited(CliError):
    def __init__(self, name: str, returncode: int, log_path: Path) -> None:
        tail = log_tail(log_path)
        how = (f"was killed by {signal.Signals(-returncode).name}" if returncode < 0
               else f"exited with status {returncode}")
        super().__init__(f"{name} {how}" + (f":\n{tail}" if tail else "") + f"\n(full log: {log_path})")
        self.name = name
        self.returncode = returncode


@dataclass(slots=True)
class Child:
    name: str
    process: subprocess.Popen
    log_path: Path
    argv: tuple[str, ...] = ()
    restarts: list[float] = field(default_factory=list)  # when it was started again (monotonic)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _death_signal_hook() -> Callable[[], None] | None:
    """A preexec function asking Linux to SIGTERM the child when its parent dies."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)  # loaded here, in the parent: nothing to import after fork
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    return lambda: prctl(pr_set_pdeathsig, int(signal.SIGTERM))


class Supervisor:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[Child] = []
        self._preexec = _death_signal_hook()

    def start(self, name: str, argv: Sequence[str]) -> Child:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        child = Child(name, self._spawn(argv, log_path, "wb"), log_path, tuple(argv))
        self.children.append(child)
        return child

    def _spawn(self, argv: Sequence[str], log_path: Path, mode: str) -> subprocess.Popen:
        with open(log_path, mode) as log:  # the child keeps its own copy of the descriptor
            return subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=self._preexec,
            )

    def check_alive(self, restartable: Callable[[Child], bool] = lambda child: False) -> list[str]:
        """Start again each ended child that `restartable` allows (within its budget) and say so in the
        returned lines; raise ChildExited for the first other child that has ended."""
        said = []
        for child in self.children:
            code = child.process.poll()
            if code is None:
                continue
            now = time.monotonic()
            child.restarts[:] = [t for t in child.restarts if now - t < RESTART_WINDOW_S]
            if not restartable(child) or len(child.restarts) >= RESTARTS_MAX:
                raise ChildExited(child.name, code, child.log_path)
            child.restarts.append(now)
            child.process = self._spawn(child.argv, child.log_path, "ab")
            how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
            said.append(f"{child.name} {how}; started again (pid {child.process.pid})")
        return said

    def stop(self, waves: Sequence[Sequence[Child]], grace_s: float = 10.0) -> None:
        """SIGTERM each wave at once, wait up to grace_s, SIGKILL what is left, then the next wave."""
        for wave in waves:
            _stop_wave(wave, grace_s)


def _stop_wave(children: Sequence[Child], grace_s: float) -> None:
    running = [c for c in children if c.process.poll() is None]
    for child in running:
        _signal(child, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in running:
        try:
            child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(child, signal.SIGKILL)
            child.process.wait()


def _signal(child: Child, signum: int) -> None:
    # The whole process group: a child's own helpers go with it.
    try:
        os.killpg(child.process.pid, signum)
    except ProcessLookupError:
        pass
