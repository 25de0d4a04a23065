"""Dependency targets as users write them (`12`, `12_3`, an array's id) turned into raw job ids."""
from __future__ import annotations

import re
from collections.abc import Callable

from corral.engine.admission import AdmissionError
from corral.engine.arrays import parse_array
from corral.engine.records import Job

_TARGET = re.compile(r"^(\d+)(?:_(\d+))?(\+\d+)?$")


def resolve_dependency(text: str, lookup: Callable[[int], Job | None]) -> tuple[str, list[Job]]:
    """The dependency with raw ids, and every job it names (for the engine to know their states)."""
    out_parts: list[str] = []
    named: list[Job] = []
    separator = "?" if "?" in text else ","
    for part in text.split(separator):
        if part == "singleton":
            out_parts.append(part)
            continue
        kind, _, ids = part.partition(":")
        raw: list[str] = []
        for token in ids.split(":"):
            m = _TARGET.match(token)
            if not m:
                raise AdmissionError(f"invalid job id {token!r} in dependency")
            jobs = _targets(int(m.group(1)), int(m.group(2)) if m.group(2) else None, lookup)
            named.extend(jobs)
            raw.extend(str(j.id) for j in jobs)
        out_parts.append(f"{kind}:{':'.join(raw)}")
    return separator.join(out_parts), named


def _targets(job_id: int, task: int | None, lookup: Callable[[int], Job | None]) -> list[Job]:
    job = lookup(job_id)
    if job is None:
        raise AdmissionError(f"job dependency problem: job {job_id} does not exist")
    spec = job.spec
    if spec.array_job_id is None:
        if task is not None:
            raise AdmissionError(f"job dependency problem: job {job_id} is not an array")
        return [job]
    base = spec.array_job_id
    indices, _ = parse_array(spec.array_indices)
    if task is not None:
        if task not in indices:
            raise AdmissionError(f"job dependency problem: array {base} has no task {task}")
        found = lookup(base + indices.index(task))
        return [found] if found is not None else []
    if job_id != base:
        return [job]  # a task's own raw id
    return [j for i in range(len(indices)) if (j := lookup(base + i)) is not None]
