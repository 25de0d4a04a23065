"""Which job records an id in Slurm's forms (corral.jobref) names, read as slurmctld reads it: `N` is
job N or, when N is an array's id, every task of that array; `N_I` and `N_[...]` name tasks of the
array whose id is N, and nothing else (not the array a task id N belongs to)."""
from __future__ import annotations

from collections.abc import Callable

from corral.engine.arrays import parse_array
from corral.engine.records import Job
from corral.jobref import JobRef


class UnknownRef(LookupError):
    """The id names no job; the message says which part is missing."""


def named_job_ids(ref: JobRef, lookup: Callable[[int], Job | None]) -> list[int]:
    """The raw ids of the records `ref` names, in order (an array's tasks have consecutive ids)."""
    job = lookup(ref.job_id)
    if job is None:
        raise UnknownRef(f"job {ref.job_id} does not exist")
    spec = job.spec
    if spec.array_job_id != job.id:  # a plain job, or one task's own id
        if ref.tasks is None:
            return [job.id]
        if spec.array_job_id is not None:
            raise UnknownRef(f"job {ref.job_id} is not an array (it is task {spec.array_task_id} of array "
                             f"{spec.array_job_id})")
        raise UnknownRef(f"job {ref.job_id} is not an array")
    indices, _ = parse_array(spec.array_indices)
    chosen = [job.id + offset for offset, index in enumerate(indices) if ref.tasks is None or ref.has_task(index)]
    if not chosen:
        raise UnknownRef(f"array {ref.job_id} has no task {ref.text.partition('_')[2]}")
    return chosen
