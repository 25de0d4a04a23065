"""The node's health: what drains it besides an operator. Slurm's model (slurm.conf HealthCheckProgram,
HealthCheckInterval; NHC's conventions) plus NVML's own signs of a failing GPU:

- the operator's health-check program (e.g. /usr/sbin/nhc) runs when the agent starts, every `interval_s`
  after, and (with `before_job`) before each job's tasks start here; exiting non-zero means unhealthy, and
  the last line it printed is the reason (NHC prints "ERROR: nhc: Health check failed: ..."). A program
  that drains the node itself (NHC through scontrol) works too: corral's scontrol does that.
- on a node whose GPUs came from NVML: critical XID events as they happen, and the counters every
  `nvml_interval_s` (nvml_health.py).

Each failure is reported (`report(reason)`, which the agent posts as protocol.NodeUnhealthy); the
controller drains the node with that reason and stops its jobs as for a failed node: requeued, or
NODE_FAIL. A failing check before a job refuses its launch: the job goes back to the queue, as after a
failed Slurm prolog. Coming back is the operator's call (scontrol update State=RESUME), as in Slurm.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from corral.agent.nvml_health import NvmlHealth

log = logging.getLogger(__name__)

REASON_MAX_CHARS = 200  # a drain reason is one line people read in sinfo -R


@dataclass(frozen=True)
class HealthConfig:
    program: Path | None = None  # the operator's health-check program (None: none)
    interval_s: float = 300.0  # between its runs (0: only when the agent starts, and before jobs)
    timeout_s: float = 60.0  # a run that takes longer is killed and counts as a failure
    before_job: bool = False  # also run it before each job's tasks start here
    nvml_interval_s: float = 60.0  # between polls of NVML's counters (0: none, nor XID events)

    @property
    def checks_before_job(self) -> bool:
        return self.before_job and self.program is not None


async def run_program(program: Path, timeout_s: float, node: str) -> str | None:
    """Run the health-check program once: None if it exits 0, else why the node is unhealthy."""
    env = {**os.environ, "CORRAL_NODE": node, "SLURMD_NODENAME": node}
    try:
        proc = await asyncio.create_subprocess_exec(
            str(program), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True)
    except OSError as exc:
        return _clip(f"health check {program} cannot run: {exc.strerror or exc}")
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        _kill_group(proc.pid)
        await proc.wait()
        return _clip(f"health check {program} timed out after {timeout_s:g}s")
    code = proc.returncode or 0  # communicate() waited for the exit
    if code == 0:
        return None
    lines = [line.strip() for line in output.decode(errors="replace").splitlines() if line.strip()]
    status = f"exited {code}" if code > 0 else f"killed by signal {-code}"
    return _clip(f"{program.name}: {lines[-1]}" if lines else f"health check {program} {status}")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # its own session: whatever it started goes with it
    except ProcessLookupError:
        pass


def _clip(reason: str) -> str:
    return reason if len(reason) <= REASON_MAX_CHARS else reason[: REASON_MAX_CHARS - 3] + "..."


class HealthMonitor:
    """Runs the checks `config` asks for and calls `report(reason)` for each failure. `run()` works until
    cancelled and never raises; `check_before_job()` is the pre-launch check."""

    def __init__(self, config: HealthConfig, node: str, report: Callable[[str], None], *, nvml: bool) -> None:
        """`nvml`: the node's GPUs came from NVML (watch their XIDs and counters)."""
        self.config = config
        self._node = node
        self._report = report
        self._nvml = nvml and config.nvml_interval_s > 0
        self._program_lock = asyncio.Lock()  # one run of the program at a time (NHC is not re-entrant)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            if self.config.program is not None:
                group.create_task(self._program_loop())
            if self._nvml:
                group.create_task(self._nvml_loop())

    async def check_before_job(self, job_id: int) -> str | None:
        """Run the program before job `job_id` starts here; the reason (reported already) if it fails."""
        if not self.config.checks_before_job:
            return None
        reason = await self._run_program()
        if reason is not None:
            log.error("health check before job %d failed: %s", job_id, reason)
        return reason

    async def _run_program(self) -> str | None:
        assert self.config.program is not None
        async with self._program_lock:
            reason = await run_program(self.config.program, self.config.timeout_s, self._node)
        if reason is not None:
            self._report(reason)
        return reason

    async def _program_loop(self) -> None:
        while True:
            try:
                reason = await self._run_program()
            except Exception:  # a bug here must not take the agent down with it
                log.exception("running the health check failed")
                reason = None
            if reason is not None:
                log.error("health check failed: %s", reason)
            if self.config.interval_s <= 0:
                return
            await asyncio.sleep(self.config.interval_s)

    async def _nvml_loop(self) -> None:
        health = NvmlHealth()
        try:
            await asyncio.to_thread(health.open)
        except Exception as exc:  # noqa: BLE001 - NVML answered discovery: say why it fails now, run on
            log.error("NVML health checks are off: %s", exc)
            return
        try:
            async with asyncio.TaskGroup() as group:
                if health.watches_xids:
                    group.create_task(self._xid_loop(health))
                group.create_task(self._counter_loop(health))
        finally:
            await asyncio.to_thread(health.close)

    async def _xid_loop(self, health: NvmlHealth) -> None:
        while True:
            try:
                reason = await asyncio.to_thread(health.wait_xid)
            except Exception as exc:  # noqa: BLE001 - one failed wait must not end the watch
                log.warning("waiting for XID events failed: %s", exc)
                await asyncio.sleep(self.config.nvml_interval_s)
                continue
            if reason is not None:
                self._report(reason)

    async def _counter_loop(self, health: NvmlHealth) -> None:
        while True:
            try:
                reasons = await asyncio.to_thread(health.check_counters)
            except Exception as exc:  # noqa: BLE001 - one failed poll must not end the watch
                log.warning("reading NVML's health counters failed: %s", exc)
                reasons = []
            if reasons:
                log.error("GPU health: %s", "; ".join(reasons))
                self._report(_clip("; ".join(reasons)))
            await asyncio.sleep(self.config.nvml_interval_s)
