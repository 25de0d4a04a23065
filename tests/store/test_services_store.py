"""Service records through the store: saved, loaded back equal, deleted when forgotten; and rows that
the code before services wrote (no services table yet, jobs without service fields) still read."""
from __future__ import annotations

from dataclasses import fields

from corral.api.services import ServiceSpec
from corral.controller.restore import restore_engine
from corral.engine import events as ev
from corral.engine.config import SIMULATED, EngineConfig
from corral.engine.records import ReplicaRestarts, Service
from corral.store import Store
from tests.engine.builders import T0, engine_with_nodes
from tests.store.factories import pending_job


def full_service(name: str = "web") -> Service:
    spec = ServiceSpec(name=name, user="alice",
                       workdir="/srv", command=["serve", "--port", "8000"], replicas=3, gpus_per_node=1,
                       ports=[{"name": "http", "port": 0}], probes={"readiness": {"http": {"path": "/ok",
                                                                                          "port": "http"}}},
                       env={"A": "1"}, placement={"spread": True, "max_per_node": 1}, min_ready=1,
                       autoscale={"min_replicas": 1, "max_replicas": 4, "target_inflight": 8,
                                  "scale_down_window_s": 15})
    return Service(spec=spec, revision=4, desired_replicas=2, created=1000.5, previous_revision=3,
                   previous_spec=spec.model_copy(update={"command": ["serve"]}), update_started=1200.25,
                   deleted=True, restarts={0: ReplicaRestarts(5, 2), 2: ReplicaRestarts(1, 1)},
                   reason="replica 2 not admitted: over quota",
                   history=[{"t": 1000.5, "event": "applied", "revision": 1}], load=(3.0, 12.5, 1300.0),
                   last_busy=1299.0, uid=1001, lower_since=(1250.5, 1))


def test_full_service_sets_every_field() -> None:
    defaults = Service(spec=full_service().spec, revision=1, desired_replicas=1, created=0.0)
    same = [f.name for f in fields(Service) if getattr(full_service(), f.name) == getattr(defaults, f.name)]
    assert same == ["spec"], "every field but the spec (given to both) differs from its default"


def test_a_service_round_trips_and_is_deleted_once_forgotten(store: Store) -> None:
    service = full_service()
    store.save(services=[service, full_service("db")])
    assert store.load_services() == [full_service("db"), service]
    store.save(services_forgotten=["db"])
    assert [s.name for s in store.load_services()] == ["web"]


def test_a_job_row_without_service_fields_reads_as_its_old_kind(store: Store) -> None:
    job = pending_job(5)
    store.save(jobs=[job])
    loaded = store.get_job(5)
    assert loaded is not None and loaded.spec.kind.name == "command"
    assert (loaded.spec.service, loaded.spec.replica, loaded.ready, loaded.endpoints) == ("", -1, False, {})


def test_a_restored_engine_has_its_services_and_replicas_and_submits_no_duplicates(store: Store) -> None:
    engine = engine_with_nodes(count=2)
    spec = ServiceSpec(name="web", command=["serve"], replicas=2, gpus_per_node=1, workdir="/srv")
    results = [engine.handle(ev.ServiceApplied(spec, "alice"), now=T0),
               engine.handle(ev.CycleDue(), now=T0 + 1)]
    for result in results:
        store.save(result.jobs, result.nodes, services=result.services)
    store.save(nodes=engine.nodes.values())
    restored = restore_engine(EngineConfig(start_delay_s=0.0), SIMULATED, store, T0 + 2)
    assert restored.services == engine.services
    before = sorted(restored.jobs)
    restored.handle(ev.ServiceScaled("web", 2), now=T0 + 3)
    assert sorted(restored.jobs) == before, "its replicas are known: none submitted again"


def test_a_draining_replica_is_still_draining_after_a_restart(store: Store) -> None:
    """Its SIGTERM is due at drain_until: a controller that takes over must not forget the drain (it would
    list the replica for traffic again)."""
    engine = engine_with_nodes(count=2)
    spec = ServiceSpec(name="web", command=["serve"], replicas=2, gpus_per_node=1, workdir="/srv")
    results = [engine.handle(ev.ServiceApplied(spec, "alice"), now=T0), engine.handle(ev.CycleDue(), now=T0 + 1)]
    for job in [j for j in engine.jobs.values() if j.spec.service == "web"]:
        results += [engine.handle(ev.TasksStarted(node, job.id), now=T0 + 2) for node in job.runs]
    results.append(engine.handle(ev.ServiceScaled("web", 1), now=T0 + 5))
    for result in results:
        store.save(result.jobs, result.nodes, services=result.services)
    leaving = [j for j in engine.jobs.values() if j.spec.service == "web" and j.spec.replica == 1][0]
    assert leaving.drain_until is not None
    assert store.get_job(leaving.id).drain_until == leaving.drain_until
