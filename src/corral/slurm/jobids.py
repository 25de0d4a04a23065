"""Job ids as Slurm writes them: `N`, array tasks `A_a`, pending remainders `A_[ranges%N]`, steps
`J.batch` / `J.0`; and the array index expressions of `sbatch --array`."""
from __future__ import annotations

from _collections_abc import Iterable, Mapping

from corral.ranges import compress_ranges
from corral.slurm import records

MAX_ARRAY_SIZE = 1001  # Slurm's default MaxArraySize: task ids 0..1000


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


def parse_task_spec(spec: str) -> tuple[list[int], int | None]:
    """`0-9%2`, `1,3,5-7`, `0-15:4` -> (sorted task ids, throttle). Raises ValueError."""
    body, _, throttle_text = spec.partition("%")
    if throttle_text and not throttle_text.isdigit():
        raise ValueError(f"invalid throttle in {spec!r}")
    ids: set[int] = set()
    for item in body.split(","):
        first, last, step = _range(item)
        ids.update(range(first, last + 1, step))
    if max(ids) >= MAX_ARRAY_SIZE:
        raise ValueError(f"array index above {MAX_ARRAY_SIZE - 1} in {spec!r}")
    return sorted(ids), int(throttle_text) if throttle_text else None


def _range(item: str) -> tuple[int, int, int]:
    """`a`, `a-b` or `a-b:step` -> (first, last, step); int() raises ValueError on anything else."""
    first_text, dash, rest = item.partition("-")
    last_text, colon, step_text = rest.partition(":")
    if not first_text.isdigit() or (dash and not last_text.isdigit()) or (colon and not step_text.isdigit()):
        raise ValueError(f"invalid array index {item!r}")
    first = int(first_text)
    last = int(last_text) if dash else first
    step = int(step_text) if colon else 1
    if last < first or step < 1:
        raise ValueError(f"invalid array range {item!r}")
    return first, last, step
