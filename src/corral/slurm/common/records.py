"""Reading corral's records (JSON dicts shaped like the API's JobOut, NodeOut, PartitionOut) in Slurm's terms.

Fields the API does not send yet are read with the defaults below, so the formatters work with
today's records and pick the new fields up as they arrive. Times are epoch seconds (floats)."""
from __future__ import annotations

from _collections_abc import Mapping

from corral.slurm.common import states

# Optional JobOut fields, with the value that stands for "not given".
JOB_DEFAULTS: Mapping[str, object] = {
    "array_job_id": None,
    "array_task_id": None,
    "array_throttle": None,  # an array's %N: how many of its tasks may run at once
    "array_task_spec": None,  # a record standing for an array's pending tasks: "5-9%2"
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
    "reservation": "",
    # Beyond the planned fields, read when present (see the report): when the job became eligible,
    # group, command path and stdin.
    "eligible_time": None,
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


def reason(job: Mapping) -> str:
    """The job's reason as Slurm names it, filling in what Slurm sets for finished jobs."""
    text = str(job.get("reason") or "None")
    state = states.job_state(job)
    if state == "PENDING" and get(job, "held") and text not in _HELD_REASONS:
        return "JobHeldUser"  # a hold outranks what the job waited for before (Dependency, Priority)
    if text != "None":
        return text
    if state == "FAILED":
        sig = int(job.get("exit_signal", 0))
        return f"RaisedSignal:{sig}({_signal_name(sig)})" if sig else "NonZeroExitCode"
    if state == "TIMEOUT":
        return "TimeLimit"
    return text


_HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})


def _signal_name(number: int) -> str:
    import signal  # only failed jobs need it; the module costs start-up time (enum)
    try:
        return signal.strsignal(number) or str(number)
    except ValueError:
        return str(number)


# Pending reasons for which Slurm has not made the job eligible yet (EligibleTime=Unknown).
_NOT_ELIGIBLE = frozenset({"JobHeldUser", "JobHeldAdmin", "JobArrayTaskLimit", "Dependency", "BeginTime"})


def eligible_time(job: Mapping) -> float | None:
    """When the job became eligible to start: the record's own value, else its submission, except
    for a job still pending on a hold, a throttle, a dependency or a begin time (not yet)."""
    if job.get("eligible_time") is not None:
        return job["eligible_time"]
    if states.job_state(job) == "PENDING" and (get(job, "held") or reason(job) in _NOT_ELIGIBLE):
        return None
    return job.get("submit_time")
