"""Which jobs squeue lists, in which order (squeue/print.c _filter_job, squeue/sort.c).

Slurm breaks ties in its sort by the order of the controller's job list; here ties fall back to the
job id, so the output is reproducible."""
from __future__ import annotations

from _collections_abc import Callable, Iterable, Mapping, Sequence

from corral.jobref import JobRef
from corral.slurm.common import jobids, records, states

DEFAULT_SORT = "P,t,-p"  # partition, compact state (PD before R), priority descending


def state_matches(job: Mapping, wanted: frozenset[str] | None) -> bool:
    """No --states: unfinished jobs only (even with --jobs). `all` arrives as every state name."""
    state = states.job_state(job)
    if wanted is None:
        return state in states.ACTIVE_STATES
    return state in wanted or states.FLAG_BASE.get(state) in wanted


def filter_jobs(jobs: Iterable[Mapping], *, job_ids: Sequence[JobRef] | None = None,
                job_states: frozenset[str] | None = None, users: Sequence[str] | None = None,
                names: Sequence[str] | None = None, partitions: Sequence[str] | None = None,
                accounts: Sequence[str] | None = None, qos: Sequence[str] | None = None) -> list[Mapping]:
    """Users match by name or uid; every other filter by exact text, as squeue does. Only the filters given
    are checked (a 100,000-job listing paid 0.3 s for checks of filters nobody gave)."""
    checks: list[Callable[[Mapping], bool]] = []
    if job_ids is not None:
        checks.append(lambda job: any(jobids.names(ref, job) for ref in job_ids))
    if users is not None:
        checks.append(lambda job: str(job.get("user")) in users or str(records.get(job, "uid")) in users)
    if names is not None:
        checks.append(lambda job: job.get("name") in names)
    if partitions is not None:
        checks.append(lambda job: job.get("partition") in partitions)
    if accounts is not None:
        checks.append(lambda job: records.get(job, "account") in accounts)
    if qos is not None:
        checks.append(lambda job: records.get(job, "qos") in qos)
    if job_states is None:  # the usual listing: unfinished jobs, told by their state alone
        chosen = [job for job in jobs if str(job.get("state", "PENDING")).upper() in states.ACTIVE_STATES]
    else:
        chosen = [job for job in jobs if state_matches(job, job_states)]
    for check in checks:
        chosen = [job for job in chosen if check(job)]
    return chosen


def combine_pending_array_tasks(jobs: Iterable[Mapping]) -> list[Mapping]:
    """Pending tasks of one array (same name and partition) as one `A_[2-9%2]` record, as squeue
    (_combine_pending_array_tasks) and sacct show them; differing reasons are joined with commas.
    A record that already stands for several tasks (array_task_spec) absorbs its pending siblings."""
    out: list[Mapping | tuple] = []
    groups: dict[tuple, list[Mapping]] = {}
    for job in jobs:
        array_id = records.get(job, "array_job_id")
        if states.job_state(job) != "PENDING" or array_id is None or not records.is_array(job):
            out.append(job)
            continue
        key = (array_id, job.get("name"), job.get("partition"))
        if key not in groups:
            groups[key] = []
            out.append(key)
        groups[key].append(job)
    return [_combined(groups[item]) if isinstance(item, tuple) else item for item in out]


def _combined(tasks: list[Mapping]) -> Mapping:
    if len(tasks) == 1:
        return tasks[0]
    ids: set[int] = set()
    throttle = records.get(tasks[0], "array_throttle")
    for task in tasks:
        spec = records.get(task, "array_task_spec")
        if spec:
            spec_ids, spec_throttle = jobids.parse_task_spec(spec)
            ids.update(spec_ids)
            throttle = throttle or spec_throttle
        else:
            ids.add(records.get(task, "array_task_id"))
    first = tasks[0]
    # A record that already stands for several tasks carries their reasons joined: split them again.
    reasons = ",".join(dict.fromkeys(r for t in tasks for r in str(t.get("reason") or "None").split(",")))
    return {**first, "id": records.get(first, "array_job_id"), "array_task_id": None, "reason": reasons,
            "array_task_spec": jobids.format_task_ranges(ids, throttle)}


def expand_array_remainders(jobs: Iterable[Mapping]) -> list[Mapping]:
    """`squeue -r`: one line per pending array task instead of the collapsed `A_[2-9%2]` record."""
    out: list[Mapping] = []
    for job in jobs:
        spec = records.get(job, "array_task_spec")
        if not spec:
            out.append(job)
            continue
        for task_id in jobids.parse_task_spec(spec)[0]:
            out.append({**job, "array_task_id": task_id, "array_task_spec": None})
    return out


def _number(name: str) -> Callable[[Mapping], float]:
    return lambda job: float(job.get(name) or 0)


_SORT_KEYS: Mapping[str, Callable[[Mapping], object]] = {
    "A": lambda j: j["id"],
    "i": lambda j: (records.get(j, "array_job_id") or j["id"], records.get(j, "array_task_id") or -1),
    "P": lambda j: str(j.get("partition", "")),
    "t": states.job_state_compact,
    "T": states.job_state,
    "p": _number("priority"),
    "Q": _number("priority"),
    "j": lambda j: str(j.get("name", "")),
    "u": lambda j: str(j.get("user", "")),
    "U": lambda j: int(records.get(j, "uid")),
    "D": _number("num_nodes"),
    "C": records.num_cpus,
    "l": lambda j: j.get("time_limit_s") or float("inf"),
    "S": _number("start_time"),
    "V": _number("submit_time"),
    "e": _number("end_time"),
    "r": lambda j: str(j.get("reason", "")),
}


# The record fields each sort key reads (for the fields squeue asks the controller for; "C" is left out:
# a job's CPUs come from its slices, which squeue then asks for with every other field).
SORT_READS: Mapping[str, tuple[str, ...]] = {
    "A": ("id",), "i": ("id", "array_job_id", "array_task_id"), "P": ("partition",), "t": ("state",),
    "T": ("state",), "p": ("priority",), "Q": ("priority",), "j": ("name",), "u": ("user",), "U": ("uid",),
    "D": ("num_nodes",), "l": ("time_limit_s",), "S": ("start_time",), "V": ("submit_time",),
    "e": ("end_time",), "r": ("reason",),
}
# What squeue reads of every job whatever it prints: the state filter, the ids filter, the combining of an
# array's pending tasks (name, partition and reasons), and the job ids.
SELECT_READS = ("id", "array_job_id", "array_task_id", "array_task_spec", "array_throttle", "state", "name",
                "partition", "reason")
# What each other filter reads, only when it is given (SqueueOptions' names): a 100,000-job listing without
# them spent a fifth of its fields, on the wire and in the records it builds, on values it never looked at.
FILTER_READS: Mapping[str, tuple[str, ...]] = {
    "users": ("user", "uid"), "names": ("name",), "partitions": ("partition",), "accounts": ("account",),
    "qos": ("qos",), "nodes": ("nodelist",), "reservation": ("reservation",),
}


def sort_key(letter: str) -> Callable[[Mapping], object] | None:
    """The key function of a `-S` letter; None for a letter sort_jobs skips."""
    return _SORT_KEYS.get(letter)


def sort_reads(spec: str) -> tuple[str, ...] | None:
    """The fields a `-S` specification reads; None when one of its keys has none declared."""
    reads: list[str] = []
    for key in (k for k in spec.split(",") if k):
        letter = key.lstrip("+-")
        if letter not in _SORT_KEYS:
            continue  # skipped by sort_jobs too
        if letter not in SORT_READS:
            return None
        reads.extend(SORT_READS[letter])
    return tuple(reads)


def sort_jobs(jobs: Iterable[Mapping], spec: str = DEFAULT_SORT) -> list[Mapping]:
    """Sort by a `-S` specification (`P,t,-p`): comma-separated keys, `-` for descending, `+` ascending.

    Unknown keys are skipped, as squeue skips them."""
    ordered = sorted(jobs, key=lambda j: j["id"])
    for key in reversed([k for k in spec.split(",") if k]):
        descending = key.startswith("-")
        letter = key.lstrip("+-")
        if letter not in _SORT_KEYS:
            continue
        ordered.sort(key=_SORT_KEYS[letter], reverse=descending)  # stable, so earlier keys win
    return ordered
