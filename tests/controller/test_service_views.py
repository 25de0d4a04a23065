"""What the API shows of a service and its endpoints (controller/service_views.py), from records shaped as
the design fixes them (engine/records.py's Service, and a replica Job's `spec.service`, `spec.replica`,
`endpoints`, `ready`, `probes`): stand-ins carrying exactly those fields, so that each case is one line."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.api.services import ServiceSpec
from corral.controller.service_views import EndpointVersions, endpoint_set, service_out
from corral.core.model import NodeSlice
from corral.engine.history import LivenessFailed
from corral.engine.records import JobState

SPEC = ServiceSpec.model_validate({"name": "web", "user": "alice", "command": ["serve"], "workdir": "/srv",
                                   "replicas": 3, "ports": [{"name": "http"}, {"name": "admin", "port": 9000}],
                                   "probes": {"readiness": {"tcp": {"port": "http"}}}})
T0 = 1_700_000_000.0


@dataclass
class ReplicaSpec:
    service: str
    replica: int
    service_revision: int = 1


@dataclass
class Replica:
    id: int
    spec: ReplicaSpec
    state: JobState = JobState.RUNNING
    reason: str = "None"
    slices: tuple[NodeSlice, ...] = ()
    restart_count: int = 0
    start_time: float | None = T0
    history: list[dict[str, Any]] = field(default_factory=list)
    endpoints: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> port name -> port
    ready: bool = False
    drain_until: float | None = None

    @property
    def draining(self) -> bool:
        return self.drain_until is not None


@dataclass
class Service:
    spec: ServiceSpec
    revision: int = 1
    desired_replicas: int = 3
    created: float = T0
    uid: int = 1000
    deleted: bool = False
    reason: str = ""
    load: tuple[float, float, float] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


def on(node: str) -> tuple[NodeSlice, ...]:
    return (NodeSlice(node, (), 1, 0),)


ADDRESSES = {"node1": "10.0.0.1", "node2": "10.0.0.2"}


def replicas() -> list[Replica]:
    return [
        Replica(11, ReplicaSpec("web", 1), slices=on("node2"), ready=True, restart_count=2,
                endpoints={"node2": {"http": 31002, "admin": 9000}},
                history=[LivenessFailed(T0 - 100, "node2", "an earlier run's"),
                         LivenessFailed(T0 + 5, "node2", "liveness probe failed 3 times: HTTP 500")]),
        Replica(10, ReplicaSpec("web", 0), slices=on("node1"), ready=True,
                endpoints={"node1": {"admin": 9000, "http": 31001}}),
        Replica(12, ReplicaSpec("web", 2), state=JobState.PENDING, reason="QuotaExceeded"),
        Replica(13, ReplicaSpec("other", 0), slices=on("node1"), ready=True, endpoints={"node1": {"http": 1}}),
        Replica(14, ReplicaSpec("web", 0, 2), slices=on("node2"), ready=False,
                endpoints={"node2": {"http": 31003}}),
    ]


def test_a_service_shows_its_replicas_by_index_with_node_state_probes_and_endpoints():
    history = [{"t": T0, "event": "applied", "revision": 1}, {"t": T0 + 60, "event": "scaled", "replicas": 3}]
    out = service_out(Service(SPEC, history=history, load=(4.0, 12.5, T0 + 61)), replicas(), ADDRESSES)
    assert [(r.index, r.job_id, r.revision) for r in out.replicas] == [(0, 14, 2), (0, 10, 1), (1, 11, 1), (2, 12, 1)]
    assert (out.desired_replicas, out.ready_replicas, out.reason) == (3, 2, "QuotaExceeded")
    second = out.replicas[2]
    assert (second.node, second.state, second.ready, second.restarts) == ("node2", "RUNNING", True, 2)
    assert list(second.endpoints.items()) == [("http", "10.0.0.2:31002"), ("admin", "10.0.0.2:9000")]
    assert [(p.kind, p.ok, p.consecutive, p.detail) for p in second.probes] == [
        ("readiness", True, 0, ""), ("liveness", False, 3, "liveness probe failed 3 times: HTTP 500")]
    assert [(p.kind, p.ok) for p in out.replicas[1].probes] == [("readiness", True)]  # no failure in this run
    assert out.replicas[3].probes == []  # pending: no probe runs
    assert out.history == ["2023-11-14T22:13:20Z applied revision=1", "2023-11-14T22:14:20Z scaled replicas=3"]
    assert out.load is not None and (out.load.inflight, out.load.rps) == (4.0, 12.5)


def test_the_engines_reason_says_why_it_waits():
    out = service_out(Service(SPEC, reason="replica 2: QOS normal's GPU limit is reached"), replicas(), ADDRESSES)
    assert out.reason == "replica 2: QOS normal's GPU limit is reached"


def test_endpoints_are_the_ready_replicas_first_port_first_those_being_stopped_draining():
    jobs = replicas()
    jobs[1].state = JobState.COMPLETING  # being stopped: its SIGTERM waits for the drain delay
    found = endpoint_set(Service(SPEC), jobs, ADDRESSES)
    assert [(e.replica, e.job_id, e.draining) for e in found] == [(0, 10, True), (1, 11, False)]
    jobs[0].state, jobs[0].ready = JobState.COMPLETING, False  # stopped before it was ready: never routed to
    assert [e.job_id for e in endpoint_set(Service(SPEC), jobs, ADDRESSES)] == [10]
    assert next(iter(found[0].ports)) == "http"  # the gateway routes to the spec's first port


def test_the_version_moves_only_when_the_set_changes_and_starts_past_a_restart():
    versions = EndpointVersions(start_ms=5_000)
    service = Service(SPEC)
    jobs = replicas()
    first = versions.current("web", endpoint_set(service, jobs, ADDRESSES))
    assert first > 5_000
    assert versions.current("web", endpoint_set(service, jobs, ADDRESSES)) == first
    jobs[0].ready = False
    second = versions.current("web", endpoint_set(service, jobs, ADDRESSES))
    assert second > first
    restarted = EndpointVersions(start_ms=second + 1_000)  # a controller started later
    assert restarted.current("web", endpoint_set(service, jobs, ADDRESSES)) > second


def test_the_gauges_per_service():
    from corral.controller.service_metrics import service_metrics

    records = {"web": Service(SPEC, revision=2, desired_replicas=3),
               "gone": Service(SPEC.model_copy(update={"name": "gone"}), deleted=True)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in service_metrics(records, replicas()) for s in family.samples}
    web = (("service", "web"),)
    assert samples[("corral_service_replicas_desired", web)] == 3
    assert samples[("corral_service_replicas_ready", web)] == 2  # jobs 10 and 11; 14 runs, not ready
    assert samples[("corral_service_replicas", (("service", "web"), ("state", "RUNNING")))] == 3
    assert samples[("corral_service_replicas", (("service", "web"), ("state", "PENDING")))] == 1
    assert samples[("corral_service_replica_restarts", web)] == 2
    assert samples[("corral_service_revision", web)] == 2
    assert not any(labels == (("service", "gone"),) for _name, labels in samples)  # deleted: no series
    assert [len(family.samples) for family in service_metrics({}, replicas())] == [0] * 5  # named, empty


def test_others_see_the_names_of_its_variables_not_their_values_nor_its_script():
    spec = SPEC.model_copy(update={"env": {"API_KEY": "s3cret"}})
    assert service_out(Service(spec), [], ADDRESSES).spec.env == {"API_KEY": "s3cret"}
    hidden = service_out(Service(spec), [], ADDRESSES, reveal=False).spec
    assert hidden.env == {"API_KEY": "(hidden)"} and hidden.command == ["serve"]
    scripted = SPEC.model_copy(update={"command": None, "script": "#!/bin/sh\nexport TOKEN=x\n"})
    assert service_out(Service(scripted), [], ADDRESSES, reveal=False).spec.script == "(hidden)"
