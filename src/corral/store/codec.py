"""Records <-> table rows.

Encoding is exact: decode(encode(x)) == x for every Job and Node, including tuples (stored as JSON
lists), frozensets (sorted lists), enums (their values) and None. Field lists come from the
dataclasses, so the nested JSON follows new fields of JobSpec, Request, NodeRun and Gpu; a new
field that is not plain JSON (a tuple, a set, an enum) needs a converter here.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from dataclasses import fields
from operator import attrgetter
from typing import Any, cast

from corral import hostlist
from corral.api.services import ServiceSpec
from corral.core.model import Gpu, NodeSlice, Request
from corral.engine.history import history_from_json, history_to_json
from corral.engine.records import (
    PREEMPTED,
    STOP_CAUSES,
    Job,
    JobSpec,
    JobState,
    Node,
    NodeRun,
    ReplicaRestarts,
    Service,
    Step,
)

Json = dict[str, Any]

# Compact JSON from one reused encoder (the JSON columns are encoded on every save).
# Tuples become lists. No circular check: records are trees.
json_dumps = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


class _Fields:
    """The constructor fields of a dataclass (init=False ones, like Request.shape, are derived)."""

    def __init__(self, cls: type) -> None:
        self.names = tuple(f.name for f in fields(cls) if f.init)
        # Returns a tuple of all the fields: one C call instead of a getattr per field.
        self._get = attrgetter(*self.names)

    def to_json(self, obj: object) -> Json:
        return dict(zip(self.names, self._get(obj), strict=True))

    def known(self, data: Mapping[str, Any]) -> Json:
        # Keys written by a newer corral (a field this version lacks) are dropped, not fatal.
        return {name: data[name] for name in self.names if name in data}


_SPEC = _Fields(JobSpec)
_REQUEST = _Fields(Request)
_RUN = _Fields(NodeRun)
_GPU = _Fields(Gpu)


def spec_to_json(spec: JobSpec) -> Json:
    # argv stays a tuple and env the spec's own dict: JSON encodes them as they are, and
    # skipping the copies matters on the save path.
    data = _SPEC.to_json(spec)
    data["request"] = _REQUEST.to_json(spec.request)
    return data


class Sharing:
    """One object for each value that many decoded jobs hold equal: an array's tasks and a user's jobs
    have the same strings, environment, argv and request. Submission shares them (the tasks of an
    array are copies of one spec); without this a restart gave each job its own, and 100,000 restored
    jobs took 2.5 times the memory they had before the restart."""

    def __init__(self) -> None:
        self._values: dict[Any, Any] = {}
        self._envs: dict[tuple, dict[str, str]] = {}

    def value(self, value: Any) -> Any:
        """`value` (hashable) or the equal one seen first."""
        return self._values.setdefault(value, value)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        # Specs never change their environment once made (arrays' tasks already share one).
        return self._envs.setdefault(tuple(env.items()), env)


def spec_from_json(data: Mapping[str, Any], sharing: Sharing | None = None) -> JobSpec:
    values = _SPEC.known(data)
    values["request"] = Request(**_REQUEST.known(data["request"]))
    values["argv"] = tuple(data.get("argv", ()))
    if sharing is not None:
        for name, value in values.items():
            if isinstance(value, (str, tuple, Request)):
                values[name] = sharing.value(value)
        if "env" in values:
            values["env"] = sharing.env(values["env"])
    return JobSpec(**values)


class SpecView:
    """A stored job's spec as a listing reads it: the attributes of a JobSpec, its stored JSON's own dict
    taken as they are (absent keys read as JobSpec's defaults, from the class), with no JobSpec built.

    Building a JobSpec (a frozen dataclass of 55 fields) was the largest part of decoding a stored job; a
    listing (Store.stream_listed_jobs) reads a few of its fields, encodes them and lets the job go. A view
    is for reading only, never for the engine: it compares and hashes by identity, not by value as a JobSpec
    does, and nothing stops a write to it (none is made; tests/store/test_listed_jobs.py compares every field
    with a JobSpec's)."""

    kind = JobSpec.kind  # JobSpec's properties, which read only its fields

    @classmethod
    def of(cls, data: dict[str, Any]) -> JobSpec:
        """`data` (a spec's decoded JSON, which the view takes as its own) as a JobSpec to read."""
        data["request"] = Request(**_REQUEST.known(data["request"]))
        data["argv"] = tuple(data.get("argv", ()))
        return cls.of_fields(data)

    @classmethod
    def of_fields(cls, data: dict[str, Any]) -> JobSpec:
        """A view of fields already decoded (the request a Request, argv a tuple), which it takes as its own."""
        view = cls()
        view.__dict__ = data
        return cast(JobSpec, view)


def _spec_defaults() -> None:
    """SpecView's class attributes: JobSpec's defaults (a default factory's value made once: read only)."""
    for spec_field in fields(JobSpec):
        if spec_field.default is not dataclasses.MISSING:
            setattr(SpecView, spec_field.name, spec_field.default)
        elif spec_field.default_factory is not dataclasses.MISSING:
            setattr(SpecView, spec_field.name, spec_field.default_factory())
        if not isinstance(getattr(SpecView, spec_field.name, None), (str, int, float, bool, type(None), tuple)):
            # A mutable default shared by every view is safe only while nothing writes it.
            assert spec_field.name in _SHARED_DEFAULTS, f"JobSpec.{spec_field.name}: a default SpecView cannot share"


_SHARED_DEFAULTS = frozenset({"env"})  # read only in a listing (container_env is its own field)
_spec_defaults()


def _slice_to_json(piece: NodeSlice) -> Json:
    out = {"node": piece.node, "gpus": piece.gpus, "cpus": piece.cpus, "mem_mib": piece.mem_mib}
    if piece.gpu_milli != 1000:  # a share of one GPU; whole-GPU rows stay as they were
        out["gpu_milli"] = piece.gpu_milli
    return out


def _slice_from_json(data: Mapping[str, Any]) -> NodeSlice:
    return NodeSlice(node=data["node"], gpus=tuple(data["gpus"]), cpus=data["cpus"], mem_mib=data["mem_mib"],
                     gpu_milli=data.get("gpu_milli", 1000))


@functools.lru_cache(maxsize=4096)
def _nodelist(node_names: tuple[str, ...]) -> str:
    # Cached: a job is saved many times on the same nodes, and jobs share node sets.
    return hostlist.compress(node_names) if node_names else ""


def job_to_row(job: Job) -> Json:
    """Every column of the jobs table, ready for an insert."""
    spec = job.spec
    return {
        "id": job.id,
        "name": spec.name,
        "user": spec.user,
        "partition": spec.request.partition,
        "state": job.state.value,
        "reason": job.reason,
        "priority": spec.priority,
        "submit_time": job.submit_time,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "estimated_start": job.estimated_start,
        "time_limit_s": spec.request.time_limit_s,
        "exit_code": job.exit_code,
        "exit_signal": job.exit_signal,
        "gpu_seconds": job.gpu_seconds,
        "nodelist": _nodelist(job.node_names),
        "restart_count": job.restart_count,
        "final_state": job.final_state.value if job.final_state is not None else None,
        "kill_deadline": job.kill_deadline,
        "spec": spec_to_json(spec),
        "slices": [_slice_to_json(piece) for piece in job.slices],
        "runs": {node: _RUN.to_json(run) for node, run in job.runs.items()},
        "account": spec.account,
        "extra": {"held": job.held, "prior_gpu_seconds": job.prior_gpu_seconds,
                  "reason_detail": job.reason_detail, "history": [history_to_json(h) for h in job.history],
                  "steps": [_step_to_json(step) for step in job.steps], "eligible_at": job.eligible_at,
                  "preemptions": job.preemptions, "warned": job.warned, "stop_cause": job.stop_cause,
                  "expedited": job.expedited, "hold_nodes": list(job.hold_nodes), "hold_until": job.hold_until,
                  **({"ready": job.ready, "endpoints": job.endpoints, "drain_until": job.drain_until}
                     if job.spec.service else {})},
    }


def job_from_row(row: Any, sharing: Sharing | None = None) -> Job:
    """`row`: a result row of the jobs table (attribute access by column name). Jobs decoded with one
    `sharing` share their equal parts."""
    reason = sharing.value(row.reason) if sharing is not None else row.reason
    return _job_from_row(row, spec_from_json(row.spec, sharing), reason)


def listed_job_from_row(row: Any) -> Job:
    """job_from_row for a listing that reads the job and lets it go: its spec a SpecView of the row's JSON."""
    return _job_from_row(row, SpecView.of(row.spec), row.reason)


def listed_job_from_parts(row: Any, spec: JobSpec, slices: list[Any], runs: dict[str, Any],
                          extra: dict[str, Any]) -> Job:
    """listed_job_from_row for a row read apart (store/listed.py): its spec made, its JSON parts decoded."""
    return _job_from_row(row, spec, row.reason, slices, runs, extra)


def _job_from_row(row: Any, spec: JobSpec, reason: str, slices: list[Any] | None = None,
                  runs: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> Job:
    if slices is None:
        slices, runs, extra = row.slices, row.runs, row.extra
    assert runs is not None
    extra = extra or {}
    return Job(
        id=row.id,
        spec=spec,
        submit_time=row.submit_time,
        state=JobState(row.state),
        reason=reason,
        estimated_start=row.estimated_start,
        start_time=row.start_time,
        end_time=row.end_time,
        slices=tuple(_slice_from_json(piece) for piece in slices),
        runs={node: NodeRun(**_RUN.known(run)) for node, run in runs.items()},
        exit_code=row.exit_code,
        exit_signal=row.exit_signal,
        final_state=JobState(row.final_state) if row.final_state is not None else None,
        kill_deadline=row.kill_deadline,
        restart_count=row.restart_count,
        held=extra.get("held", False),
        prior_gpu_seconds=extra.get("prior_gpu_seconds", 0.0),
        reason_detail=extra.get("reason_detail", ""),
        history=[history_from_json(h) for h in extra.get("history", [])],
        steps=[_step_from_json(step) for step in extra.get("steps", ())],
        eligible_at=extra.get("eligible_at"),
        expedited=extra.get("expedited", False),
        hold_nodes=tuple(extra.get("hold_nodes", ())),
        hold_until=extra.get("hold_until"),
        ready=extra.get("ready", False),
        endpoints=extra.get("endpoints", {}),
        drain_until=extra.get("drain_until"),
        **_engine_facts(extra, row.start_time),
    )


def _engine_facts(extra: dict[str, Any], start_time: float | None) -> dict[str, Any]:
    """Job.preemptions, .warned and .stop_cause; a row written before they were fields has them only in
    its history, from which they are worked out once here."""
    if "preemptions" in extra:
        return {"preemptions": extra["preemptions"], "warned": extra["warned"], "stop_cause": extra["stop_cause"]}
    history = extra.get("history", [])
    this_run = start_time is not None
    return {
        "preemptions": sum(1 for h in history if h.get("event") == PREEMPTED),
        "warned": this_run and any(h.get("event") == "signal" and h["t"] >= start_time for h in history),
        "stop_cause": next((h["event"] for h in reversed(history) if h.get("event") in STOP_CAUSES), ""),
    }


def _step_to_json(step: Step) -> Json:
    data = dataclasses.asdict(step)
    data["nodes"], data["tasks_per_node"] = list(step.nodes), list(step.tasks_per_node)
    return data


def _step_from_json(data: Mapping[str, Any]) -> Step:
    names = {f.name for f in dataclasses.fields(Step)}
    known = {k: v for k, v in data.items() if k in names}
    known["nodes"], known["tasks_per_node"] = tuple(known["nodes"]), tuple(known["tasks_per_node"])
    known["reported"] = {node: NodeRun(**_RUN.known(run)) for node, run in known.get("reported", {}).items()}
    return Step(**known)


def node_to_row(node: Node) -> Json:
    return {
        "name": node.name,
        "gpus": [_GPU.to_json(gpu) for gpu in node.gpus],
        "cpus": node.cpus,
        "mem_mib": node.mem_mib,
        "address": node.address,
        "up": node.up,
        "drain": node.drain,
        "drain_reason": node.drain_reason,
        "last_seen": node.last_seen,
        # Sorted so the stored value is deterministic (frozenset order is not).
        "partitions": sorted(node.partitions),
        # What its agent said at registration; its features too, so that a restarted controller places jobs
        # with --constraint before the agent registers again.
        "isolation": {"run_as_user": node.run_as_user, "agent_user": node.agent_user, "cgroups": node.cgroups,
                      "features": sorted(node.features)},
    }


def node_from_row(row: Any) -> Node:
    isolation = dict(row.isolation or {})
    features = frozenset(isolation.pop("features", ()))
    return Node(
        name=row.name,
        gpus=tuple(Gpu(**_GPU.known(gpu)) for gpu in row.gpus),
        cpus=row.cpus,
        mem_mib=row.mem_mib,
        address=row.address,
        up=row.up,
        drain=row.drain,
        drain_reason=row.drain_reason,
        last_seen=row.last_seen,
        partitions=frozenset(row.partitions),
        features=features,
        **isolation,
    )


def service_to_row(service: Service) -> Json:
    """Every column of the services table. The spec is stored as its JSON dump (pydantic's own)."""
    previous = service.previous_spec
    return {
        "name": service.name,
        "user": service.spec.user,
        "revision": service.revision,
        "desired_replicas": service.desired_replicas,
        "created": service.created,
        "deleted": service.deleted,
        "spec": service.spec.model_dump(mode="json"),
        "extra": {"previous_revision": service.previous_revision,
                  "previous_spec": previous.model_dump(mode="json") if previous is not None else None,
                  "update_started": service.update_started,
                  "restarts": {str(index): [r.count, r.streak] for index, r in sorted(service.restarts.items())},
                  "reason": service.reason, "history": service.history,
                  "load": list(service.load) if service.load is not None else None,
                  "last_busy": service.last_busy, "uid": service.uid,
                  "lower_since": list(service.lower_since) if service.lower_since is not None else None},
    }


def service_from_row(row: Any) -> Service:
    extra = row.extra or {}
    previous = extra.get("previous_spec")
    load = extra.get("load")
    lower = extra.get("lower_since")
    return Service(
        spec=ServiceSpec.model_validate(row.spec),
        revision=row.revision,
        desired_replicas=row.desired_replicas,
        created=row.created,
        deleted=bool(row.deleted),
        previous_revision=extra.get("previous_revision", 0),
        previous_spec=ServiceSpec.model_validate(previous) if previous is not None else None,
        update_started=extra.get("update_started"),
        restarts={int(index): ReplicaRestarts(count, streak)
                  for index, (count, streak) in extra.get("restarts", {}).items()},
        reason=extra.get("reason", ""),
        history=list(extra.get("history", [])),
        load=(load[0], load[1], load[2]) if load is not None else None,
        last_busy=extra.get("last_busy", 0.0),
        uid=extra.get("uid", 0),
        lower_since=(lower[0], lower[1]) if lower is not None else None,
    )
