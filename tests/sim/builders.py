"""Tiny synthetic inputs for the simulator tests, and a skip for trace files this machine lacks."""
from __future__ import annotations

from pathlib import Path

import pytest

from corral.sim.metrics import JobResult
from corral.sim.workload import TraceJob

FIXTURES = Path(__file__).parent / "fixtures"


def needs(path: Path) -> Path:
    if not Path(path).exists():
        pytest.skip(f"trace file {path} not present on this machine")
    return Path(path)


def job(id: int = 1, *, submit_s: float = 0.0, duration_s: float = 100.0, nodes: int = 1, gpus: int = 1,
        gpu_milli: int = 1000, queue: str = "q", time_limit_s: int | None = None, name: str = "") -> TraceJob:
    return TraceJob(id=id, submit_s=submit_s, duration_s=duration_s, num_nodes=nodes, gpus_per_node=gpus,
                    gpu_milli=gpu_milli, cpus_per_node=1, mem_per_node_mib=0, gpu_model=None, user="u",
                    account="a", queue=queue, time_limit_s=time_limit_s, name=name)


def ran(trace_job: TraceJob, start_s: float, **kwargs) -> JobResult:
    """The job started at start_s and ran its full duration."""
    return JobResult(trace_job, start_s, start_s + trace_job.duration_s, **kwargs)
