"""corral's own accounting export (`GET /api/v1/accounting`: a JSON list of `JobOut`) as a Workload.

Only jobs that ran to an end count: duration = end_time - start_time. Jobs that never started
(cancelled while pending) and jobs still running have no runtime to replay; they are skipped and
counted in the workload's notes. submit_s counts from the earliest submission kept. The shape is
the recorded gang (num_nodes x gpus_per_node, tasks_per_node x cpus_per_task CPUs, memory per node);
queue = partition; corral has no accounts, so account = user.
"""
from __future__ import annotations

import json
import os
from typing import Any

from pydantic import ValidationError

from corral.api.schemas import JobOut
from corral.sim.traces._csv import TraceFormatError
from corral.sim.workload import GPU_MILLI_WHOLE, TraceJob, Workload


def read_accounting(path: str | os.PathLike[str]) -> Workload:
    """Read a saved accounting export (a JSON file holding a list of JobOut objects)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(path, exc.lineno, f"not JSON: {exc.msg}") from None
    return accounting_workload(data, source=str(path))


def accounting_workload(records: Any, *, source: str = "accounting export") -> Workload:
    """The same from already-parsed JSON (e.g. an httpx response's .json())."""
    if not isinstance(records, list):
        raise TraceFormatError(source, None, f"expected a JSON list of jobs, got {type(records).__name__}")
    finished: list[tuple[int, JobOut]] = []
    never_started = still_running = 0
    for index, record in enumerate(records):
        job = _validate(record, index, source)
        if job.start_time is None:
            never_started += 1
        elif job.end_time is None:
            still_running += 1
        else:
            finished.append((index, job))
    origin_s = min((j.submit_time for _, j in finished), default=0.0)
    jobs = tuple(_trace_job(j, origin_s, source, index) for index, j in finished)
    notes = [f"{len(jobs)} finished job(s) replayed with their recorded runtimes; account = user"]
    if never_started:
        notes.append(f"{never_started} job(s) skipped: never started")
    if still_running:
        notes.append(f"{still_running} job(s) skipped: still running at export")
    return Workload(jobs, "corral-accounting", f"{source}: corral accounting export", origin_s, tuple(notes))


def _validate(record: Any, index: int, source: str) -> JobOut:
    try:
        return JobOut.model_validate(record)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TraceFormatError(source, None, f"job #{index}: {where}: {first['msg']}") from None


def _trace_job(job: JobOut, origin_s: float, source: str, index: int) -> TraceJob:
    assert job.start_time is not None and job.end_time is not None
    if job.end_time < job.start_time or job.start_time < job.submit_time:
        raise TraceFormatError(source, None, f"job #{index} (id {job.id}): times out of order "
                                             f"(submit {job.submit_time}, start {job.start_time}, end {job.end_time})")
    return TraceJob(
        id=job.id, submit_s=job.submit_time - origin_s, duration_s=job.end_time - job.start_time,
        num_nodes=job.num_nodes, gpus_per_node=job.gpus_per_node, gpu_milli=GPU_MILLI_WHOLE,
        cpus_per_node=job.tasks_per_node * job.cpus_per_task, mem_per_node_mib=job.mem_per_node_mib,
        gpu_model=None, user=job.user, account=job.user, queue=job.partition,
        time_limit_s=job.time_limit_s, priority=job.priority, name=job.name,
    )
