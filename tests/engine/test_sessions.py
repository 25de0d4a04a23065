"""Notebook sessions (a service with `session = true`, its replica of kind `session`): run once, never
restarted or requeued; whatever ends the replica (it exits, its time limit, a cancel, a preemption) ends
the service, with the reason in its history, and the GPUs go back."""
from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from corral.api.services import ServiceSpec
from corral.api.tenancy import TenancySpec
from corral.core.model import Gpu
from corral.engine.build import build_engine
from corral.engine.commands import Kill, Launch
from corral.engine.config import SIMULATED, EngineConfig
from corral.engine.membership import Inventory
from corral.engine.records import JobState
from tests.engine.builders import T0, engine_with_nodes, spec
from tests.engine.harness import Harness
from tests.engine.test_services import exit_, replicas, run


def notebook(**more) -> ServiceSpec:
    return ServiceSpec(**{"name": "nb", "command": ["jupyter", "lab"], "gpus_per_node": 1, "workdir": "/home/a",
                          "ports": [{"name": "http"}], "session": True, **more})


def started(engine, now: float = T0):
    engine.apply_service(notebook(), now)
    job = replicas(engine, "nb")[0]
    engine.schedule(now)
    run(engine, job, now)
    return job


def test_a_session_replica_is_of_kind_session_and_is_not_requeueable() -> None:
    engine = engine_with_nodes(count=1)
    job = started(engine)
    assert (job.spec.kind.name, job.spec.session, job.spec.requeue, job.state) == (
        "session", True, False, JobState.RUNNING)


def test_a_session_that_exits_is_not_restarted_and_its_service_is_gone() -> None:
    engine = engine_with_nodes(count=1, gpus=1)
    job = started(engine)
    exit_(engine, job, 0, T0 + 30)
    assert job.state is JobState.COMPLETED and "nb" not in engine.services
    batch = engine.submit(spec(gpus=1), T0 + 31)
    assert engine.schedule(T0 + 31) == [Launch(batch.id, "node1")], "its GPU is free again"


def test_a_cancelled_session_ends_its_service_with_the_reason() -> None:
    engine = engine_with_nodes(count=1)
    job = started(engine)
    service = engine.services["nb"]
    engine.cancel(job.id, T0 + 5)
    exit_(engine, job, 0, T0 + 6)
    assert job.state is JobState.CANCELLED and "nb" not in engine.services
    assert service.history[-1]["event"] == "session-ended"
    assert service.history[-1]["detail"].startswith(f"job {job.id}: cancelled")



def test_no_other_replica_starts_while_a_cancelled_session_is_stopping() -> None:
    """A cancel moves the replica to COMPLETING while its processes stop (a Ray cluster takes seconds): the
    session is over from then on; the reconciler must not start a second one in its place."""
    engine = engine_with_nodes(count=2)
    job = started(engine)
    kills = engine.cancel(job.id, T0 + 5)
    assert kills and job.state is JobState.COMPLETING
    assert [j.id for j in replicas(engine, "nb")] == [job.id], "no replacement replica was submitted"
    assert engine.schedule(T0 + 6) == []
    assert engine.services["nb"].history[-1]["event"] == "session-ended"
    exit_(engine, job, 0, T0 + 7)
    assert job.state is JobState.CANCELLED and "nb" not in engine.services

def test_a_preempted_session_ends_rather_than_coming_back() -> None:
    tenancy = TenancySpec(qos=[{"name": "notebooks"}, {"name": "normal"},
                               {"name": "train", "priority": 10, "preempts": ["notebooks"]}])
    engine = Harness(build_engine(EngineConfig(), SIMULATED, tenancy=tenancy))
    engine.register_node("n1", Inventory(tuple(Gpu(i) for i in range(1)), 64, 512_000, "x"), set(), set(), T0)
    engine.apply_service(notebook(qos="notebooks"), T0)
    job = replicas(engine, "nb")[0]
    engine.schedule(T0)
    run(engine, job, T0)
    urgent = engine.submit(dataclasses.replace(spec(gpus=1), qos="train"), T0 + 1)
    assert [(c.job_id, c.reason) for c in engine.schedule(T0 + 1) if isinstance(c, Kill)] == [(job.id, "preemption")]
    exit_(engine, job, 0, T0 + 2)
    assert job.state is JobState.PREEMPTED and "nb" not in engine.services
    assert engine.schedule(T0 + 2) == [Launch(urgent.id, "n1")]


@pytest.mark.parametrize(("more", "problem"), [
    ({"replicas": 2}, "a session has exactly one replica, not 2"),
    ({"public": True}, "a session is its owner's alone"),
    ({"ports": []}, "a session needs a port"),
])
def test_a_session_spec_that_cannot_be_one_is_refused(more, problem) -> None:
    with pytest.raises(ValidationError, match=problem):
        notebook(**more)


def test_a_session_stops_at_its_time_limit_and_its_service_is_gone() -> None:
    engine = engine_with_nodes(count=1, node_timeout_s=1000)
    engine.apply_service(notebook(time_limit_s=60), T0)
    job = replicas(engine, "nb")[0]
    service = engine.services["nb"]
    engine.schedule(T0)
    run(engine, job, T0)
    assert engine.tick(T0 + 60 - 1) == []
    assert [c.reason for c in engine.tick(T0 + 60)] == ["time-limit"]
    engine.node_finished("node1", job.id, [(0, 0, 15)], None, T0 + 60 + 1)
    assert job.state is JobState.TIMEOUT and "nb" not in engine.services
    assert service.history[-1]["detail"] == f"job {job.id}: time limit"


def test_a_session_on_a_share_of_a_gpu_leaves_the_rest_of_it_to_others() -> None:
    engine = engine_with_nodes(count=1, gpus=1)
    engine.apply_service(notebook(gpu_share="shard:2"), T0)
    job = replicas(engine, "nb")[0]
    assert (job.spec.gpu_share, job.spec.request.gpu_milli) == ("shard:2", 250), "2 of the GPU's 8 shards"
    engine.apply_service(notebook(name="nb2", gpu_share="mps:50"), T0)
    other = replicas(engine, "nb2")[0]
    assert sorted(c.job_id for c in engine.schedule(T0)) == sorted([job.id, other.id]), "both on the one GPU"
