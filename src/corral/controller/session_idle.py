"""The idle stop of a session (a notebook, `idle_timeout_s` in its spec): stopped once its kernels AND its
GPUs have been idle for the idle timeout.

Why here, in the controller, and not in the engine: both inputs are things the engine never holds. The
kernels' activity is JupyterLab's own answer (`/api/status`, `/api/kernels` under the session's gateway
path, asked with the session's upstream token, which only the controller and the gateway can make), and
the GPU utilisation is the agents' latest samples, which the controller keeps in memory only
(usage_views.LiveUsage). The rule itself is `idle_verdict`, pure; the engine only sees its outcome, a
`CancelRequested` whose reason goes into the job's history and whose note into the notebook's log.

Jupyter's own culling is left off (api/notebooks.py): it judges by kernel activity alone, and would
kill a kernel that is idle in its sense while a thread of it keeps the GPU busy.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from corral.controller.service_views import endpoint_ports
from corral.controller.usage_views import combine
from corral.durations import format_duration_short
from corral.engine.engine import Engine
from corral.engine.records import Job, JobState

log = logging.getLogger("corral.controller")

GPU_IDLE_PCT = 5  # the agents' threshold (agent/usage.py GPU_IDLE_PCT): a sample under it counts as idle
TICK_S = 1.0  # how often the watch looks for sessions due a check
ASK_TIMEOUT_S = 5.0
BUSY_STATES = ("busy", "starting")


@dataclass(frozen=True, slots=True)
class KernelActivity:
    """What JupyterLab says of its kernels: how many run something now, and how long since its last
    activity (a kernel's message, an API request, a terminal's output; Jupyter's `last_activity`)."""

    kernels: int
    busy: int
    idle_s: float


def check_period_s(idle_timeout_s: float) -> float:
    """How often a session is looked at: a fifth of its idle timeout, between 1 s and 30 s, so the stop
    comes at most that late."""
    return max(1.0, min(30.0, idle_timeout_s / 5))


def kernel_activity(status: Mapping[str, Any], kernels: list[Mapping[str, Any]], now: float) -> KernelActivity:
    """JupyterLab's `/api/status` and `/api/kernels` answers as KernelActivity (ValueError: not those)."""
    last = datetime.fromisoformat(str(status["last_activity"]).replace("Z", "+00:00")).timestamp()
    busy = sum(1 for kernel in kernels if kernel.get("execution_state") in BUSY_STATES)
    return KernelActivity(kernels=len(kernels), busy=busy, idle_s=max(0.0, now - last))


def idle_verdict(kernels: KernelActivity | None, usage: Mapping[str, Any] | None, holds_gpus: bool,
                 idle_timeout_s: float) -> str | None:
    """Why the session is to stop now, or None to keep it. Idle means both: no kernel busy and no Jupyter
    activity for the timeout, and (when it holds GPUs) its GPUs sampled under GPU_IDLE_PCT on every node
    for as long. What cannot be told keeps it: JupyterLab not answering (`kernels` None), or GPUs never
    sampled (a node without NVML)."""
    if kernels is None or kernels.busy or kernels.idle_s < idle_timeout_s:
        return None
    span = format_duration_short(idle_timeout_s)
    if not holds_gpus:
        return f"idle for {span}: kernels idle (it holds no GPU)"
    if usage is None or not usage.get("gpus") or usage["gpu_idle_s"] < idle_timeout_s:
        return None
    return f"idle for {span}: kernels idle and GPU utilisation below {GPU_IDLE_PCT}%"


class SessionIdleWatch:
    """Asks each running session with an idle timeout, every check_period_s, and stops the idle ones.

    `engine()`: the engine while this controller leads, else None; `usage_of(job_id)`: the job's own tasks'
    latest samples by node; `secret(job)`: the session's upstream token; `addresses()`: node -> address;
    `stop(job_id, reason)`: cancels the job with that reason (history and log)."""

    def __init__(self, engine: Callable[[], Engine | None], usage_of: Callable[[int], Mapping[str, Any]],
                 secret: Callable[[Job], str], stop: Callable[[int, str], Awaitable[None]],
                 clock: Callable[[], float]) -> None:
        self._engine = engine
        self._usage_of = usage_of
        self._secret = secret
        self._stop = stop
        self._clock = clock
        self._due: dict[int, float] = {}  # job id -> when it is next asked
        self._unanswered: set[int] = set()  # sessions whose JupyterLab did not answer (said once)

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=ASK_TIMEOUT_S, trust_env=False) as client:
            while True:
                await asyncio.sleep(TICK_S)
                try:
                    await self.check(client)
                except asyncio.CancelledError:
                    raise
                except Exception:  # one bad round must not end the watch
                    log.exception("session idle check failed")

    async def check(self, client: httpx.AsyncClient) -> None:
        engine = self._engine()
        if engine is None:
            return
        now = self._clock()
        watched = {job.id: (job, timeout) for job, timeout in _idle_watched(engine)}
        for job_id in [j for j in self._due if j not in watched]:
            del self._due[job_id]
            self._unanswered.discard(job_id)
        for job_id, (job, timeout_s) in watched.items():
            due = self._due.setdefault(job_id, now + check_period_s(timeout_s))
            if now < due:
                continue
            self._due[job_id] = now + check_period_s(timeout_s)
            address = _jupyter_url(engine, job)
            if address is None:
                continue
            kernels = await self._ask(client, job, address)
            usage = combine(self._usage_of(job_id))
            verdict = idle_verdict(kernels, usage, any(s.gpus for s in job.slices), timeout_s)
            if verdict is not None:
                log.info("session %s (job %d): %s: stopping it", job.spec.service, job_id, verdict)
                await self._stop(job_id, verdict)

    async def _ask(self, client: httpx.AsyncClient, job: Job, base: str) -> KernelActivity | None:
        headers = {"Authorization": f"token {self._secret(job)}"}
        params = {"no_track_activity": "1"}  # asking must not count as activity
        try:
            status = await client.get(f"{base}api/status", headers=headers, params=params)
            kernels = await client.get(f"{base}api/kernels", headers=headers, params=params)
            status.raise_for_status()
            kernels.raise_for_status()
            activity = kernel_activity(status.json(), kernels.json(), self._clock())
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            if job.id not in self._unanswered:
                self._unanswered.add(job.id)
                log.warning("session %s (job %d): JupyterLab at %s does not say whether it is idle (%s): kept",
                            job.spec.service, job.id, base, exc)
            return None
        self._unanswered.discard(job.id)
        return activity


def _idle_watched(engine: Engine) -> list[tuple[Job, int]]:
    """Running, ready sessions whose spec has an idle timeout, with it."""
    found = []
    for job in engine.jobs.values():
        if not job.spec.session or job.state is not JobState.RUNNING or not job.ready:
            continue
        service = engine.services.get(job.spec.service)
        timeout = service.spec.idle_timeout_s if service is not None else None
        if timeout is not None:
            found.append((job, timeout))
    return found


def _jupyter_url(engine: Engine, job: Job) -> str | None:
    """JupyterLab's base URL on the session's first node: its first port, under the gateway path it serves
    (sessions keep the gateway's prefix: the endpoints reply's keep_prefix)."""
    service = engine.services.get(job.spec.service)
    if service is None:
        return None
    addresses = {name: node.address for name, node in engine.nodes.items()}
    ports = endpoint_ports(job, addresses, [port.name for port in service.spec.ports])
    first = next(iter(ports.values()), None)
    return f"http://{first}/s/{job.spec.service}/" if first else None
