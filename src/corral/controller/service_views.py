"""What the REST API shows of services (docs/services.md): a service with its replicas, and the ready
endpoints the gateway routes to, with a version to long-poll on.

The engine holds each service as a record (`engine/records.py: Service`) and each replica as a Job whose
spec names the service (`JobSpec.service`, `service_revision`, `replica`) and which carries its
`endpoints` (per node, port name -> port, as the agents reported them) and `ready` (from its readiness
probe)."""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from corral.api.services import (
    EndpointOut,
    EndpointsOut,
    LoadOut,
    ProbeStatusOut,
    ReplicaOut,
    ServiceOut,
    ServiceSpec,
)
from corral.engine.history import LivenessFailed
from corral.engine.records import Job, Service


def replicas_of(name: str, jobs: Iterable[Job]) -> list[Job]:
    """The active jobs that are replicas of service `name`, by replica index, then newest first (during a
    rolling update two jobs can hold one index: the old revision's and the new one's)."""
    found = [job for job in jobs if job.spec.service == name]
    return sorted(found, key=lambda job: (_replica_index(job), -job.id))


def _replica_index(job: Job) -> int:
    return job.spec.replica


def is_ready(job: Job) -> bool:
    return job.state.value == "RUNNING" and job.ready


def endpoint_ports(job: Job, addresses: Mapping[str, str], order: Sequence[str] = ()) -> dict[str, str]:
    """`host:port` per port name, on the replica's first node (where its ports were chosen), in the spec's
    order of ports (`order`): the gateway routes to the first."""
    if not job.slices:
        return {}
    first = job.slices[0].node
    by_node: Mapping[str, Mapping[str, int]] = job.endpoints  # node -> name -> port
    ports = by_node.get(first) or {}
    if not ports:
        return {}
    host = addresses.get(first, first)
    rank = {name: index for index, name in enumerate(order)}
    names = sorted(ports, key=lambda name: (rank.get(name, len(rank)), name))
    return {name: f"{host}:{ports[name]}" for name in names}


def probe_status(job: Job, spec: ServiceSpec) -> list[ProbeStatusOut]:
    """What the engine knows of the replica's probes: readiness as its `ready` flag (while it runs), and
    the liveness failure that stopped its current run, in the engine's words ("liveness probe failed 3
    times: HTTP 500")."""
    shown = []
    if spec.probes.readiness is not None and job.state.value == "RUNNING":
        shown.append(ProbeStatusOut(kind="readiness", ok=is_ready(job)))
    started = job.start_time if job.start_time is not None else float("inf")
    failures = [entry for entry in job.history if isinstance(entry, LivenessFailed) and entry.t >= started]
    if failures:
        detail = failures[-1].detail
        count = _failure_count(detail)
        shown.append(ProbeStatusOut(kind="liveness", ok=False, consecutive=count, detail=detail))
    return shown


def _failure_count(detail: str) -> int:
    """3 from "liveness probe failed 3 times: ..."; 0 when the words say no number."""
    words = detail.split()
    return next((int(word) for word in words if word.isdigit()), 0)


def replica_out(job: Job, spec: ServiceSpec, addresses: Mapping[str, str]) -> ReplicaOut:
    order = [port.name for port in spec.ports]
    return ReplicaOut(
        index=_replica_index(job), job_id=job.id, revision=job.spec.service_revision,
        node=job.slices[0].node if job.slices else "", state=job.state.value, ready=is_ready(job),
        restarts=job.restart_count, probes=probe_status(job, spec), endpoints=endpoint_ports(job, addresses, order),
        reason=job.reason if job.state.value == "PENDING" else "")


HIDDEN = "(hidden)"


def service_out(record: Service, jobs: Iterable[Job], addresses: Mapping[str, str],
                reveal: bool = True) -> ServiceOut:
    """`reveal`: with the spec's environment values and script; else those read HIDDEN."""
    spec = record.spec if reveal else _redacted(record.spec)
    replicas = [replica_out(job, spec, addresses) for job in replicas_of(spec.name, jobs)]
    ready = sum(1 for replica in replicas if replica.ready)
    load = LoadOut(inflight=record.load[0], rps=record.load[1], at=record.load[2]) if record.load else None
    return ServiceOut(
        name=spec.name, user=spec.user, account=spec.account or "", revision=record.revision,
        desired_replicas=record.desired_replicas, ready_replicas=ready, created=record.created, spec=spec,
        replicas=replicas, reason=_waiting_reason(record, replicas), history=[history_line(h) for h in record.history],
        load=load)


def _redacted(spec: ServiceSpec) -> ServiceSpec:
    return spec.model_copy(update={"env": {name: HIDDEN for name in spec.env},
                                   "script": HIDDEN if spec.script is not None else None})


def _waiting_reason(record: Service, replicas: list[ReplicaOut]) -> str:
    """Why the service has fewer ready replicas than it wants: the engine's reason (a replica it could not
    admit), else the reasons its pending replicas wait."""
    if sum(1 for replica in replicas if replica.ready) >= record.desired_replicas:
        return ""
    reasons = sorted({replica.reason for replica in replicas if replica.reason and replica.reason != "None"})
    return "; ".join([record.reason] if record.reason else reasons)


def history_line(entry: Any) -> str:
    """One line of a service's history ({"t", "event", ...}): `2026-11-28T05:30:00Z scaled replicas=3`."""
    if not isinstance(entry, Mapping):
        return str(entry)
    when = entry.get("t")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)) if isinstance(when, int | float) else ""
    details = " ".join(f"{key}={value}" for key, value in entry.items() if key not in ("t", "event"))
    return " ".join(part for part in (stamp, str(entry.get("event", "")), details) if part)


def endpoint_set(record: Service, jobs: Iterable[Job], addresses: Mapping[str, str]) -> list[EndpointOut]:
    """The ready replicas' endpoints: what the gateway may route to; those being stopped (scaled down,
    replaced, deleted, preempted, restarted) marked `draining` until their processes end: the gateway
    routes no new request to them, and the engine sends their SIGTERM only after its drain delay."""
    order = [port.name for port in record.spec.ports]
    found = []
    for job in replicas_of(record.spec.name, jobs):
        ports = endpoint_ports(job, addresses, order)
        draining = job.ready and (job.draining or job.state.value == "COMPLETING")
        if (is_ready(job) or draining) and ports:
            found.append(EndpointOut(replica=_replica_index(job), job_id=job.id, node=job.slices[0].node,
                                     ports=ports, draining=draining))
    return found


class EndpointVersions:
    """A version per service's endpoint set, raised whenever a read finds the set changed, for
    `GET /services/{name}/endpoints?after=V` (answer once the version is not V). Versions start at the
    controller's start time in milliseconds, so a gateway that long-polls across a controller restart or
    a failover sees a new version at once rather than one it already had."""

    def __init__(self, start_ms: int) -> None:
        self._next = start_ms
        self._seen: dict[str, tuple[int, list[EndpointOut]]] = {}

    def current(self, name: str, endpoints: list[EndpointOut]) -> int:
        seen = self._seen.get(name)
        if seen is not None and seen[1] == endpoints:
            return seen[0]
        self._next += 1
        self._seen[name] = (self._next, endpoints)
        return self._next

    def forget(self, names: Iterable[str]) -> None:
        for name in list(names):
            self._seen.pop(name, None)


def endpoints_out(record: Service, version: int, endpoints: list[EndpointOut],
                  upstream_authorization: str = "") -> EndpointsOut:
    """`upstream_authorization`: only for the gateway (a session's application's token)."""
    session = record.spec.session
    return EndpointsOut(service=record.spec.name, version=version, public=record.spec.public,
                        owner=record.spec.user if session else "",
                        keep_prefix=session if record.spec.keep_prefix is None else record.spec.keep_prefix,
                        upstream_authorization=upstream_authorization, endpoints=endpoints)
