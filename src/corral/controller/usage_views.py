"""What jobs use (the agents' samples, agent/usage.py) as API bodies: per job or step, over its nodes.

The final aggregates of each node arrive with its NodeFinished / StepFinished and are stored on the job
record through the engine (NodeRun.usage): they are what sacct shows. The samples of running jobs only
feed `sstat` and `corral show`: they change nothing the scheduler reads and need not survive a restart (the
next sample comes within one interval), so the controller keeps the latest per job, step and node in
memory (LiveUsage) and commits nothing for them.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from corral.engine.records import Job
from corral.protocol import Event, NodeFinished, StepFinished, UsageReport

PerNode = Mapping[str, Mapping[str, Any]]
LiveOfJob = Mapping["int | None", PerNode]  # step id (None: the job's own tasks) -> node -> usage
GPU_IDLE = "gpu-idle"  # the reason in the history of a job cancelled by gpu_idle_cancel_s
# How many events between two sweeps of the entries of jobs that are gone without a finished report.
SWEEP_EVERY_EVENTS = 1000


class LiveUsage:
    """The latest usage of each running job's own tasks (step None) and steps, by node."""

    def __init__(self) -> None:
        self._latest: dict[int, dict[int | None, dict[str, dict[str, Any]]]] = {}
        self._events = 0

    def take(self, node: str, events: Iterable[Event], active: Mapping[int, Job]) -> None:
        for event in events:
            self._events += 1
            if isinstance(event, UsageReport):
                if event.job_id in active:
                    steps = self._latest.setdefault(event.job_id, {})
                    steps.setdefault(event.step_id, {})[node] = event.usage.model_dump()
            elif isinstance(event, NodeFinished | StepFinished):
                step = event.step_id if isinstance(event, StepFinished) else None
                self._latest.get(event.job_id, {}).get(step, {}).pop(node, None)
        if self._events >= SWEEP_EVERY_EVENTS:  # jobs failed or requeued without a finished report
            self._events = 0
            for job_id in [j for j in self._latest if j not in active]:
                del self._latest[job_id]

    def job_ids(self) -> list[int]:
        """The jobs with samples kept."""
        return list(self._latest)

    def of(self, job_id: int) -> dict[int | None, dict[str, dict[str, Any]]]:
        """{step id or None: {node: usage}} of one job."""
        return self._latest.get(job_id, {})

    def snapshot(self) -> dict[int, dict[int | None, dict[str, dict[str, Any]]]]:
        """A copy another thread may read while the loop takes new samples."""
        return {job: {step: dict(nodes) for step, nodes in steps.items()} for job, steps in self._latest.items()}


def combine(per_node: PerNode) -> dict[str, Any] | None:
    """One job's or step's usage over its nodes (None: none sampled): memory per node (MaxRSS is the
    largest node's, with its name), CPU time and GPU memory summed, GPU utilisation averaged by device."""
    if not per_node:
        return None
    usages = list(per_node.values())
    top = max(sorted(per_node), key=lambda node: per_node[node]["max_rss_kib"])
    with_gpus = [u for u in usages if u.get("gpus")]
    devices = sum(u["gpus"] for u in with_gpus)

    def by_device(name: str) -> float:
        return round(sum(u[name] * u["gpus"] for u in with_gpus) / devices, 1) if devices else 0.0

    return {
        "nodes": len(usages), "samples": sum(u["samples"] for u in usages),
        "interval_s": max(u["interval_s"] for u in usages),
        "rss_kib": sum(u["rss_kib"] for u in usages), "max_rss_kib": per_node[top]["max_rss_kib"],
        "max_rss_node": top, "ave_rss_kib": sum(u["ave_rss_kib"] for u in usages) // len(usages),
        "cpu_s": round(sum(u["cpu_s"] for u in usages), 3), "gpus": devices,
        "gpu_util_pct": by_device("gpu_util_pct"), "max_gpu_util_pct": max((u["max_gpu_util_pct"] for u in with_gpus),
                                                                          default=0.0),
        "ave_gpu_util_pct": by_device("ave_gpu_util_pct"),
        "max_gpu_mem_mib": sum(u["max_gpu_mem_mib"] for u in with_gpus),
        "ave_gpu_mem_mib": sum(u["ave_gpu_mem_mib"] for u in with_gpus),
        "gpu_idle_s": min((u["gpu_idle_s"] for u in with_gpus), default=0.0),
    }


def gpu_idle_flagged(usage: Mapping[str, Any] | None, flag_s: float) -> bool:
    """Whether a job's combined usage says its GPUs have stayed idle for flag_s (the gpu_idle_flag_s
    setting; 0: nothing is flagged)."""
    return bool(flag_s) and usage is not None and usage["gpus"] > 0 and usage["gpu_idle_s"] >= flag_s


def job_usage(job: Job, live: PerNode | None = None) -> dict[str, Any] | None:
    """The job's own tasks (batch shell, or every task of a job without steps): stored, else live."""
    stored = {node: run.usage for node, run in job.runs.items() if run.usage}
    return combine({**(live or {}), **stored})


def step_usage(job: Job, step_id: int, live: PerNode | None = None) -> dict[str, Any] | None:
    step = job.steps[step_id]
    stored = {node: run.usage for node, run in step.reported.items() if run.usage}
    return combine({**(live or {}), **stored})
