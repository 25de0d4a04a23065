"""Reading corral's records (JSON dicts shaped like the API's JobOut, NodeOut, PartitionOut) in Slurm's terms.

Fields the API does not send yet are read with the defaults below, so the formatters work with
today's records and pick the new fields up as they arrive. Times are epoch seconds (floats)."""
from __future__ import annotations

from collections.abc import Mapping

# Fields planned for JobOut, with the value that stands for "not given".
JOB_DEFAULTS: Mapping[str, object] = {
    "array_job_id": None,
    "array_task_id": None,
    "array_task_spec": None,  # the pending remainder of an array: "5-9%2"
    "account": "",
    "qos": "",
    "dependency": "",
    "comment": "",
    "wckey": "",
    "cancelled_by_uid": None,
    "steps": (),
    "held": False,
    "requeue": True,
    "uid": 0,
    "submit_host": "",
    # Not planned yet; Slurm prints them (see the report): group, command path, stdin.
    "group": None,
    "gid": None,
    "command": None,
    "stdin": "/dev/null",
}


def get(job: Mapping, name: str):
    """A job field, or its default when the record does not carry it."""
    value = job.get(name)
    return JOB_DEFAULTS.get(name) if value is None else value


def is_array(job: Mapping) -> bool:
    return get(job, "array_job_id") is not None and (
        get(job, "array_task_id") is not None or bool(get(job, "array_task_spec"))
    )


def time_used_s(job: Mapping, now: float) -> int:
    """Seconds the job has run (Slurm's job_time_used): 0 while pending, up to now while running."""
    start = job.get("start_time")
    if not start or job.get("state") == "PENDING":
        return 0
    end = job.get("end_time")
    if job.get("state") in ("RUNNING", "SUSPENDED") or not end:
        end = now
    return max(0, int(end) - int(start))


def num_cpus(job: Mapping) -> int:
    """CPUs of the allocation once there is one, else of the request (Slurm's NumCPUs)."""
    allocated = sum(s.get("cpus", 0) for s in job.get("slices") or ())
    return allocated or int(job.get("num_tasks", 1)) * int(job.get("cpus_per_task", 1))


def group_name(job: Mapping) -> str:
    # corral has no group yet; Slurm's default group of a user usually carries the user's name.
    return str(get(job, "group") or job.get("user", ""))


def gid(job: Mapping) -> int:
    value = get(job, "gid")
    return int(value) if value is not None else int(get(job, "uid"))


def batch_host(job: Mapping) -> str | None:
    """Where the batch script runs: the first node of the allocation."""
    slices = job.get("slices") or ()
    return slices[0]["node"] if slices else None
