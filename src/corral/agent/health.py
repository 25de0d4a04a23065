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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from corral.agent.checks import AgentLauncher, CheckResult, ProgramUnstartable, every, lines_of, run_bounded
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


class HealthProgramCheck:
    """The operator's health-check program as a Check (checks.py): run as the agent, in a session of its
    own, with the node's name in CORRAL_NODE and SLURMD_NODENAME; NHC's conventions for the verdict (the
    last line of its output, stdout and stderr together, is the reason)."""

    def __init__(self, program: Path, timeout_s: float, node: str) -> None:
        self.program, self.timeout_s = program, timeout_s
        self._launcher = AgentLauncher({**os.environ, "CORRAL_NODE": node, "SLURMD_NODENAME": node})

    async def check(self) -> CheckResult:
        program = self.program
        try:
            run = await run_bounded(self._launcher, [str(program)], self.timeout_s, merge_output=True)
        except ProgramUnstartable as exc:
            return CheckResult(False, _clip(f"health check {program} cannot run: {exc}"))
        if run.returncode is None:
            return CheckResult(False, _clip(f"health check {program} timed out after {self.timeout_s:g}s"))
        if run.returncode == 0:
            return CheckResult(True)
        lines = lines_of(run.stdout)
        code = run.returncode
        status = f"exited {code}" if code > 0 else f"killed by signal {-code}"
        reason = f"{program.name}: {lines[-1]}" if lines else f"health check {program} {status}"
        return CheckResult(False, _clip(reason))


async def run_program(program: Path, timeout_s: float, node: str) -> str | None:
    """Run the health-check program once: None if it exits 0, else why the node is unhealthy."""
    result = await HealthProgramCheck(program, timeout_s, node).check()
    return None if result.ok else result.detail


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
        self._program = None if config.program is None else HealthProgramCheck(config.program, config.timeout_s, node)

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

    async def check(self) -> CheckResult:
        """One run of the program (a Check: `every` runs it periodically); a failure is reported."""
        assert self._program is not None
        async with self._program_lock:
            result = await self._program.check()
        if not result.ok:
            self._report(result.detail)
        return result

    async def _run_program(self) -> str | None:
        result = await self.check()
        return None if result.ok else result.detail

    async def _program_loop(self) -> None:
        """At start, then every `interval_s` (never again with 0): the same loop that runs service probes."""
        def observe(result: CheckResult) -> bool:
            if not result.ok:
                log.error("health check failed: %s", result.detail)
            return self.config.interval_s > 0

        await every(self, self.config.interval_s, observe)

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
