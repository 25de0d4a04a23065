"""Job ids as Slurm writes them: `N`, array tasks `A_a`, pending remainders `A_[ranges%N]`, steps
`J.batch` / `J.0`; and the array index expressions of `sbatch --array`."""
from __future__ import annotations

from _collections_abc import Iterable, Mapping

from corral.jobref import JobRef, ascii_number
from corral.limits import MAX_ARRAY_SIZE
from corral.ranges import compress_ranges
from corral.slurm.common import records


def job_id(job: Mapping) -> str:
    """squeue %i, sacct JobID: the array form when the job belongs to an array."""
    array_id = records.get(job, "array_job_id")
    spec = records.get(job, "array_task_spec")
    if array_id is not None and spec:
        return f"{array_id}_[{spec}]"
    task = records.get(job, "array_task_id")
    if array_id is not None and task is not None:
        return f"{array_id}_{task}"
    return str(job["id"])


def names(ref: JobRef, job: Mapping) -> bool:
    """Whether the id `ref` (corral.jobref: `N`, `N_I`, `N_[...]`, `N_*`) names this record, as Slurm
    reads ids: `N` is job N or every task of array N; a task form only tasks of array N. A record that
    stands for several pending tasks (array_task_spec) is named when one of them is."""
    array_id = records.get(job, "array_job_id")
    if ref.tasks is None:
        return job["id"] == ref.job_id or array_id == ref.job_id
    if array_id != ref.job_id:
        return False
    task = records.get(job, "array_task_id")
    if task is not None and ref.has_task(task):
        return True
    spec = records.get(job, "array_task_spec")
    return bool(spec) and any(ref.has_task(index) for index in parse_task_spec(spec)[0])


def raw_job_id(job: Mapping) -> str:
    """squeue %A, sacct JobIDRaw: the record's own id (each array task has its own)."""
    return str(job["id"])


def array_job_id(job: Mapping) -> str:
    """squeue %F: the array's id, or the job's own id outside arrays."""
    array_id = records.get(job, "array_job_id")
    return str(array_id if array_id is not None and records.is_array(job) else job["id"])


def array_task_id(job: Mapping) -> str:
    """squeue %K: the remainder's index expression, the task index, or N/A."""
    spec = records.get(job, "array_task_spec")
    if spec:
        return str(spec)
    task = records.get(job, "array_task_id")
    return "N/A" if task is None else str(task)


def step_id(job: Mapping, step: Mapping, *, raw: bool = False) -> str:
    """sacct's step JobID: `<job id>.<step>` (`123_4.batch`, `123.0`)."""
    base = raw_job_id(job) if raw else job_id(job)
    return f"{base}.{step['step_id']}"


def format_task_ranges(task_ids: Iterable[int], throttle: int | None = None) -> str:
    """Slurm's bit_fmt of task ids (`2-4,7`), plus `%N` for a throttle, as squeue and sacct show them."""
    text = compress_ranges(task_ids)
    return f"{text}%{throttle}" if throttle else text


class ArraySizeError(ValueError):
    """An index past MaxArraySize: the message says the limit."""


def parse_task_spec(spec: str) -> tuple[list[int], int | None]:
    """`0-9%2`, `1,3,5-7`, `0-15:4` -> (sorted task ids, throttle). Raises ValueError (ArraySizeError for
    an index past the limit)."""
    body, _, throttle_text = spec.partition("%")
    if throttle_text and ascii_number(throttle_text) is None:
        raise ValueError(f"invalid throttle in {spec!r}")
    ids: set[int] = set()
    for item in body.split(","):
        first, last, step = _range(item)
        if last >= MAX_ARRAY_SIZE:  # checked before the range is expanded
            raise ArraySizeError(f"index {last} is past the limit: task indices go up to {MAX_ARRAY_SIZE - 1} "
                                 f"(MaxArraySize={MAX_ARRAY_SIZE})")
        ids.update(range(first, last + 1, step))
    return sorted(ids), int(throttle_text) if throttle_text else None


def _range(item: str) -> tuple[int, int, int]:
    """`a`, `a-b` or `a-b:step` -> (first, last, step), ASCII digits only; ValueError on anything else."""
    first_text, dash, rest = item.partition("-")
    last_text, colon, step_text = rest.partition(":")
    first = ascii_number(first_text)
    last = ascii_number(last_text) if dash else first
    step = ascii_number(step_text) if colon else 1
    if first is None or last is None or step is None:
        raise ValueError(f"invalid array index {item!r}")
    if last < first or step < 1:
        raise ValueError(f"invalid array range {item!r}")
    return first, last, step
