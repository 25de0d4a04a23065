"""Job lists with only the fields a client asks for (`fields=` on GET /jobs and GET /accounting), sent as
rows: a JSON array of arrays, each row's values in the order the fields were named.

A full JobOut costs the controller a pydantic model and ~900 bytes of JSON per job, and the client a dict
of 50 keys to parse: at 100,000 jobs, seconds on both sides. squeue's job lines need a few scalar fields,
so the fields that are plain reads of the job are computed here straight from the engine's record and
encoded by the json module's C encoder. The one other (a job's steps) is taken from a full JobOut built
for the job, so every field gives what the full record gives
(tests/controller/test_projection.py compares them)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from corral import hostlist
from corral.api.schemas import JobOut
from corral.controller import views
from corral.controller.usage_views import LiveOfJob, gpu_idle_flagged, job_usage
from corral.engine.records import Job, JobState

# Every field a projection may name; anything else is refused at the edge (app.py).
JOB_FIELDS: tuple[str, ...] = tuple(JobOut.model_fields)


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What a job's record depends on besides the job: the time of the list, the pending jobs' places and
    scheduling priorities, their forecast starts, what running jobs use, and the idle-GPU threshold."""

    now: float
    gpu_idle_flag_s: float
    places: Mapping[int, int]
    priority_of: Callable[[int], int | None]
    forecasts: Mapping[int, float]
    live_of: Callable[[Job], LiveOfJob | None]

    def job_out(self, job: Job) -> JobOut:
        """The full record, as GET /jobs sends it without `fields`."""
        out = views.job_out(job, self.now, self.live_of(job), self.forecasts.get(job.id),
                            gpu_idle_flag_s=self.gpu_idle_flag_s)
        out.position = self.places.get(job.id)
        priority = self.priority_of(job.id)
        if priority is not None:
            out.priority = priority  # the multifactor priority the scheduler uses
        return out


Getter = Callable[[Job, JobFacts], object]


def _estimate(job: Job, facts: JobFacts) -> tuple[float | None, str | None]:
    forecast = facts.forecasts.get(job.id)
    if forecast is not None and job.state is JobState.PENDING:
        return max(forecast, facts.now), "forecast"
    return job.estimated_start, "reservation" if job.estimated_start is not None else None


def _elapsed(job: Job, facts: JobFacts) -> float:
    if job.start_time is None:
        return 0.0
    return max(0.0, (job.end_time if job.end_time is not None else facts.now) - job.start_time)


def _priority(job: Job, facts: JobFacts) -> int:
    priority = facts.priority_of(job.id)
    return job.spec.priority if priority is None else priority


def _gpu_seconds(job: Job, facts: JobFacts) -> float:
    if job.end_time is not None:
        return job.gpu_seconds
    return job.prior_gpu_seconds + job.run_gpu_seconds(facts.now)


def _slices(job: Job, facts: JobFacts) -> list[dict]:
    return [{"node": s.node, "gpus": list(s.gpus), "cpus": s.cpus, "mem_mib": s.mem_mib, "gpu_milli": s.gpu_milli}
            for s in job.slices]


def _usage(job: Job, facts: JobFacts) -> dict | None:
    return job_usage(job, (facts.live_of(job) or {}).get(None))


def _spec(name: str) -> Getter:
    return lambda job, facts: getattr(job.spec, name)


def _request(name: str) -> Getter:
    return lambda job, facts: getattr(job.spec.request, name)


def _job(name: str) -> Getter:
    return lambda job, facts: getattr(job, name)


# The fields read straight from the engine's record, each as views.job_out computes it.
_CHEAP: Mapping[str, Getter] = {
    "id": _job("id"), "name": _spec("name"), "user": _spec("user"),
    "state": lambda job, facts: job.state.value, "reason": _job("reason"), "partition": _request("partition"),
    "priority": _priority, "submit_time": _job("submit_time"), "start_time": _job("start_time"),
    "end_time": _job("end_time"), "estimated_start": lambda job, facts: _estimate(job, facts)[0],
    "estimated_start_source": lambda job, facts: _estimate(job, facts)[1],
    "time_limit_s": _request("time_limit_s"), "elapsed_s": _elapsed, "num_nodes": _request("num_nodes"),
    "tasks_per_node": _request("tasks_per_node"),
    "num_tasks": lambda job, facts: job.spec.request.num_nodes * job.spec.request.tasks_per_node,
    "gpus_per_node": _request("gpus_per_node"), "cpus_per_task": _request("cpus_per_task"),
    "mem_per_node_mib": _request("mem_per_node_mib"), "total_gpus": _request("total_gpus"),
    "nodelist": lambda job, facts: hostlist.compress(job.node_names) if job.slices else "",
    "slices": _slices, "gpu_share": _spec("gpu_share"), "exit_code": _job("exit_code"),
    "exit_signal": _job("exit_signal"), "gpu_seconds": _gpu_seconds, "workdir": _spec("workdir"),
    "output": _spec("output"), "error": _spec("error"), "restart_count": _job("restart_count"),
    "account": _spec("account"), "qos": _spec("qos"), "queue": _spec("queue"),
    "array_job_id": _spec("array_job_id"), "array_task_id": _spec("array_task_id"),
    "array_throttle": _spec("array_throttle"), "dependency": _spec("dependency"),
    "reason_detail": _job("reason_detail"), "position": lambda job, facts: facts.places.get(job.id),
    "held": _job("held"), "requeue": _spec("requeue"), "expedited_requeue": _spec("expedited_requeue"),
    "reservation": _spec("reservation"), "uid": _spec("uid"), "submit_host": _spec("submit_host"),
    "comment": _spec("comment"), "wckey": _spec("wckey"), "open_mode": _spec("open_mode"),
    "batch": _spec("batch"), "allocation": _spec("allocation"),
    "cancelled_by_uid": lambda job, facts: next(
        (h.get("uid") for h in job.history if h.get("event") == "cancelled"), None),
    "array_task_spec": lambda job, facts: None,
    "history": lambda job, facts: list(job.history), "usage": _usage,
    "gpu_idle_flagged": lambda job, facts: gpu_idle_flagged(_usage(job, facts), facts.gpu_idle_flag_s),
}


class Projection:
    """Rows of the named fields (at least one, each in JOB_FIELDS, checked by the caller)."""

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = fields
        self._getters = [_CHEAP.get(name) for name in fields]
        self._needs_full = any(getter is None for getter in self._getters)

    def record(self, job: Job, facts: JobFacts) -> dict[str, object]:
        """The job's named fields; a full JobOut only when a field is not a plain read of the job."""
        full = facts.job_out(job).model_dump(include=set(self.fields), mode="json") if self._needs_full else {}
        return {name: full[name] if getter is None else getter(job, facts)
                for name, getter in zip(self.fields, self._getters, strict=True)}

    def row(self, job: Job, facts: JobFacts) -> list[object]:
        if self._needs_full:
            record = self.record(job, facts)
            return [record[name] for name in self.fields]
        return [getter(job, facts) for getter in self._getters]  # type: ignore[misc]  # none is None here


def parse_fields(text: str | None) -> tuple[str, ...] | None:
    """`fields=` as named (comma-separated, in order, each once); None without it. Raises ValueError
    naming the fields that no job record has."""
    if text is None:
        return None
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not names:
        raise ValueError("fields names no field; leave it out for whole records")
    unknown = [name for name in names if name not in JOB_FIELDS]
    if unknown:
        raise ValueError(f"unknown job fields: {', '.join(unknown)} (known: {', '.join(JOB_FIELDS)})")
    return names
