"""Prometheus metrics the controller shell counts as things happen: scheduling cycles (duration), jobs
started, preempted and requeued, and API request latency per route template. Everything else on
/metrics is read from the engine at scrape time (metrics_collector.py). docs/metrics.md names them all.

The engine stays sans-IO: the shell counts from what the engine hands back (the cycle's CyclePlan, the
job records a Result says changed). Each app has a registry of its own, so that several controllers in
one process (tests) do not share counters.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram

from corral.core.model import CyclePlan
from corral.engine.history import InfrastructureFailed, Requeued
from corral.engine.result import Result

if TYPE_CHECKING:
    from corral.engine.engine import Engine

# Scheduling cycles: ~1 ms on an idle cluster, ~0.5 s over 100,000 jobs (engine/pacer.py).
CYCLE_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# API requests: a long poll of the agents' commands waits up to 60 s.
REQUEST_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# The route label of a request that matched no route (a 404): one series, whatever path was asked.
UNMATCHED = "unmatched"


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.cycle_seconds = Histogram(
            "corral_scheduler_cycle_duration_seconds", "Wall time of one scheduling cycle (fold, decide, commit)",
            buckets=CYCLE_BUCKETS_S, registry=r)
        self.started = Counter("corral_jobs_started", "Jobs started (each run of a requeued job counts)",
                               ["partition", "queue"], registry=r)
        self.preempted = Counter("corral_jobs_preempted", "Running jobs the scheduler chose to preempt",
                                 ["partition", "queue", "cause"], registry=r)
        self.requeued = Counter("corral_jobs_requeued", "Jobs that went back to PENDING after a run",
                                ["partition", "queue", "cause"], registry=r)
        self.infrastructure_failures = Counter(
            "corral_infrastructure_failures", "Runs whose tasks on a node ended because corral's own machinery "
            "failed there (task leader killed, cgroup removed, agent error)", ["kind", "node"], registry=r)
        self.request_seconds = Histogram(
            "corral_http_request_duration_seconds", "API request latency, by route template",
            ["method", "route", "status"], buckets=REQUEST_BUCKETS_S, registry=r)
        # Slurm's sdiag figures (slurm_schedule_cycle_*), in its unit: microseconds.
        self.cycle_count = 0
        self.cycle_last_us = 0.0
        self.cycle_max_us = 0.0

    def cycle_ran(self, seconds: float, plan: CyclePlan | None, engine: Engine) -> None:
        """A cycle took `seconds`; `plan` is what it decided (None: it ran no schedule, e.g. stopping)."""
        self.cycle_seconds.observe(seconds)
        self.cycle_count += 1
        self.cycle_last_us = seconds * 1e6
        self.cycle_max_us = max(self.cycle_max_us, self.cycle_last_us)
        if plan is None:
            return
        jobs = engine.jobs
        for start in plan.starts:
            job = jobs.get(start.job_id)
            if job is not None:
                self.started.labels(job.spec.request.partition, job.spec.queue).inc()
        for preempt in plan.preemptions:
            job = jobs.get(preempt.victim_id)
            if job is not None:
                self.preempted.labels(job.spec.request.partition, job.spec.queue, preempt.cause).inc()

    def committed(self, result: Result, now: float) -> None:
        """A Result was committed at engine time `now`: count the requeues and infrastructure failures it
        recorded (the history entries the engine appended at `now`)."""
        for job in result.jobs:
            for entry in reversed(job.history):
                if entry.t != now:
                    break
                if isinstance(entry, Requeued):
                    self.requeued.labels(job.spec.request.partition, job.spec.queue,
                                         job.stop_cause or "unknown").inc()
                elif isinstance(entry, InfrastructureFailed):
                    self.infrastructure_failures.labels(entry.kind, entry.node).inc()

    def request_done(self, method: str, route: str, status: int, seconds: float) -> None:
        self.request_seconds.labels(method, route, str(status)).observe(seconds)


class RequestTiming:
    """ASGI middleware: every HTTP request's latency, labelled by the template of the route it matched
    (`/api/v1/jobs/{job_id}`, not the path: bounded label values)."""

    def __init__(self, app, metrics: ControllerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED
            self.metrics.request_done(scope["method"], template, status, time.perf_counter() - started)
