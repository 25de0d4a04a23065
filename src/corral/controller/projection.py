"""Job lists with only the fields a client asks for (`fields=` on GET /jobs and GET /accounting), sent as
rows (a JSON array of arrays, each row's values in the order the fields were named) or, with `columns=true`,
as columns (`{"columns": [[every job's first field], [every job's second field], ...]}`).

A full JobOut costs the controller a pydantic model and ~900 bytes of JSON per job, and the client a dict
of 50 keys to parse: at 100,000 jobs, seconds on both sides. squeue's job lines need a few scalar fields,
so the fields that are attributes of the engine's record are read from it at once, the few others
computed from it (the steps and usage too, as views.job_out computes them: sacct asks for every field but the
history), and all encoded by the json module's C encoder. A field neither plain nor computed would be taken
from a full JobOut built for the job (none is today); every field gives what the full record gives
(tests/controller/test_job_fields.py compares them).

Columns cost less than rows on both sides: a plain field of a whole slice of jobs is read by one map() of an
attrgetter (no per-job list, no per-job call into Python), and the client decodes one list per field."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any

from corral import container_options, hostlist
from corral.api.schemas import JobOut
from corral.controller import views
from corral.controller.step_views import step_rows
from corral.controller.usage_views import LiveOfJob, gpu_idle_flagged, job_usage
from corral.engine.history import Cancelled, history_to_json
from corral.engine.records import Job, JobState
from corral.sim.forecast import START_WINDOW, StartWindow

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
    window: StartWindow = START_WINDOW  # the forecasts' start window, calibrated online (controller/forecasts.py)

    def job_out(self, job: Job) -> JobOut:
        """The full record, as GET /jobs sends it without `fields`."""
        out = views.job_out(job, self.now, self.live_of(job), self.forecasts.get(job.id),
                            gpu_idle_flag_s=self.gpu_idle_flag_s, window=self.window)
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


def _window(job: Job, facts: JobFacts) -> list[float] | None:
    """A pending job's start window around its forecast, as views.job_out gives it."""
    start, source = _estimate(job, facts)
    return list(facts.window.bounds(facts.now, start)) if source == "forecast" and start is not None else None


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


def _steps(job: Job, facts: JobFacts) -> list[dict]:
    """The batch step and the job steps, with what each used, as views.job_out gives them (sacct's rows)."""
    live = facts.live_of(job) or {}
    return views.batch_steps(job, live.get(None)) + step_rows(job, live)


# The fields that are an attribute of the engine's record, by its path (read by one attrgetter, in C).
_PLAIN: Mapping[str, str] = {
    "id": "id", "name": "spec.name", "user": "spec.user", "state": "state.value", "reason": "reason",
    "partition": "spec.request.partition", "submit_time": "submit_time", "start_time": "start_time",
    "end_time": "end_time", "time_limit_s": "spec.request.time_limit_s", "num_nodes": "spec.request.num_nodes",
    "tasks_per_node": "spec.request.tasks_per_node", "gpus_per_node": "spec.request.gpus_per_node",
    "cpus_per_task": "spec.request.cpus_per_task", "mem_per_node_mib": "spec.request.mem_per_node_mib",
    "total_gpus": "spec.request.total_gpus", "gpu_share": "spec.gpu_share", "exit_code": "exit_code",
    "exit_signal": "exit_signal", "workdir": "spec.workdir", "output": "spec.output", "error": "spec.error",
    "restart_count": "restart_count", "account": "spec.account", "qos": "spec.qos", "queue": "spec.queue",
    "array_job_id": "spec.array_job_id", "array_task_id": "spec.array_task_id",
    "array_throttle": "spec.array_throttle", "dependency": "spec.dependency", "reason_detail": "reason_detail",
    "held": "held", "requeue": "spec.requeue", "expedited_requeue": "spec.expedited_requeue",
    "reservation": "spec.reservation", "uid": "spec.uid", "submit_host": "spec.submit_host",
    "comment": "spec.comment", "wckey": "spec.wckey", "open_mode": "spec.open_mode", "batch": "spec.batch",
    "req_nodelist": "spec.nodelist", "exc_nodelist": "spec.exclude", "constraint": "spec.constraint",
    "exclusive": "spec.exclusive",
    "allocation": "spec.allocation",
    **{name: f"spec.{name}" for name in container_options.FIELDS},
}
# The fields computed from the record and the list's facts, each as views.job_out computes it.
_COMPUTED: Mapping[str, Getter] = {
    "priority": _priority, "estimated_start": lambda job, facts: _estimate(job, facts)[0],
    "estimated_start_source": lambda job, facts: _estimate(job, facts)[1], "elapsed_s": _elapsed,
    "estimated_start_window": _window,
    "num_tasks": lambda job, facts: job.spec.request.num_nodes * job.spec.request.tasks_per_node,
    "nodelist": lambda job, facts: hostlist.compress(job.node_names) if job.slices else "",
    "slices": _slices, "gpu_seconds": _gpu_seconds, "position": lambda job, facts: facts.places.get(job.id),
    "cancelled_by_uid": lambda job, facts: next(
        (h.uid for h in job.history if isinstance(h, Cancelled)), None),
    "array_task_spec": lambda job, facts: None,
    "history": lambda job, facts: [history_to_json(entry) for entry in job.history], "usage": _usage,
    "steps": _steps,
    "gpu_idle_flagged": lambda job, facts: gpu_idle_flagged(_usage(job, facts), facts.gpu_idle_flag_s),
}


# Computed fields of a whole slice at once, where most jobs need no Python call of their own (pending jobs
# have no slices, no start, no usage; without forecasts no job has a window): each gives what its _COMPUTED
# getter gives for every job (tests/controller/test_job_fields.py compares them with whole records).
ColumnGetter = Callable[[list[Job], JobFacts], list[object]]
_STATE_VALUE = attrgetter("state._value_")  # Enum.value is a Python property; _value_ is the plain attribute
_SLICES = attrgetter("slices")
_IDS = attrgetter("id")


def _estimates(jobs: list[Job], facts: JobFacts) -> list[object]:
    if not facts.forecasts:  # no forecast: the reserved start, as the record holds it
        return list(map(attrgetter("estimated_start"), jobs))
    return [_estimate(job, facts)[0] for job in jobs]


def _estimate_sources(jobs: list[Job], facts: JobFacts) -> list[object]:
    if not facts.forecasts:
        return [None if start is None else "reservation" for start in map(attrgetter("estimated_start"), jobs)]
    return [_estimate(job, facts)[1] for job in jobs]


def _windows(jobs: list[Job], facts: JobFacts) -> list[object]:
    if not facts.forecasts:  # a window surrounds a forecast only
        return [None] * len(jobs)
    return [_window(job, facts) for job in jobs]


def _elapsed_column(jobs: list[Job], facts: JobFacts) -> list[object]:
    starts = list(map(attrgetter("start_time"), jobs))
    if starts.count(None) == len(starts):
        return [0.0] * len(jobs)
    return [_elapsed(job, facts) for job in jobs]


def _nodelists(jobs: list[Job], facts: JobFacts) -> list[object]:
    slices = list(map(_SLICES, jobs))
    if not any(slices):
        return [""] * len(jobs)
    return [hostlist.compress(job.node_names) if job.slices else "" for job in jobs]


def _idle_flags(jobs: list[Job], facts: JobFacts) -> list[object]:
    """gpu_idle_flagged: never without the setting; without stored runs or live usage, no usage to flag."""
    if not facts.gpu_idle_flag_s:
        return [False] * len(jobs)
    return [bool(job.runs or facts.live_of(job)) and gpu_idle_flagged(_usage(job, facts), facts.gpu_idle_flag_s)
            for job in jobs]


def _priorities(jobs: list[Job], facts: JobFacts) -> list[object]:
    scheduled: list[object] = list(map(facts.priority_of, map(_IDS, jobs)))
    if scheduled.count(None) == 0:
        return scheduled
    return [job.spec.priority if priority is None else priority for job, priority in zip(jobs, scheduled, strict=True)]


_COMPUTED_COLUMNS: Mapping[str, ColumnGetter] = {
    "state": lambda jobs, facts: list(map(_STATE_VALUE, jobs)),
    "priority": _priorities, "estimated_start": _estimates, "estimated_start_source": _estimate_sources,
    "estimated_start_window": _windows, "elapsed_s": _elapsed_column, "nodelist": _nodelists,
    "gpu_idle_flagged": _idle_flags, "array_task_spec": lambda jobs, facts: [None] * len(jobs),
    "position": lambda jobs, facts: list(map(facts.places.get, map(_IDS, jobs))),
}


class Projection:
    """Rows of the named fields (at least one, each in JOB_FIELDS, checked by the caller). A row is read
    in three calls besides the computed fields: the plain attributes at once, then put in the order asked."""

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = fields
        self._full = tuple(name for name in fields if name not in _PLAIN and name not in _COMPUTED)
        plain = [name for name in fields if name in _PLAIN]
        computed = [name for name in fields if name in _COMPUTED]
        self._plain = _tuple_getter(attrgetter(*(_PLAIN[name] for name in plain)), len(plain))
        self._computed = [_COMPUTED[name] for name in computed]
        at = {name: index for index, name in enumerate([*plain, *computed, *self._full])}
        self._in_order = _tuple_getter(itemgetter(*(at[name] for name in fields)), len(fields))

    def record(self, job: Job, facts: JobFacts) -> dict[str, object]:
        return dict(zip(self.fields, self.row(job, facts), strict=True))

    def columns(self, jobs: list[Job], facts: JobFacts) -> list[list[object]]:
        """The named fields of these jobs, a list per field (in the order named), each in the jobs' order."""
        by_name: dict[str, list[object]] = {}
        for name in self.fields:
            if name in _COMPUTED_COLUMNS:
                by_name[name] = _COMPUTED_COLUMNS[name](jobs, facts)
            elif name in _PLAIN:
                by_name[name] = list(map(attrgetter(_PLAIN[name]), jobs))
            elif name in _COMPUTED:
                getter = _COMPUTED[name]
                by_name[name] = [getter(job, facts) for job in jobs]
        if self._full:
            wholes = [facts.job_out(job).model_dump(include=set(self._full), mode="json") for job in jobs]
            for name in self._full:
                by_name[name] = [whole[name] for whole in wholes]
        return [by_name[name] for name in self.fields]

    def row(self, job: Job, facts: JobFacts) -> list[object]:
        """The job's named fields; a full JobOut only for a field that is neither plain nor computed."""
        values = self._plain(job) + tuple(getter(job, facts) for getter in self._computed)
        if self._full:
            whole = facts.job_out(job).model_dump(include=set(self._full), mode="json")
            values += tuple(whole[name] for name in self._full)
        return list(self._in_order(values))


def _tuple_getter(getter: Callable[[Any], Any], count: int) -> Callable[[Any], tuple]:
    """attrgetter and itemgetter give a bare value for one name and a tuple for several: always a tuple."""
    if count == 0:
        return lambda _: ()
    if count == 1:
        return lambda value: (getter(value),)
    return getter  # a tuple for two names or more


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
