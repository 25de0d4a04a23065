"""controller/agent_events.py: a replica's launch carries its service's ports and probes in the protocol's
shapes, and an agent's reports become the engine's events; fed to a real engine, the ports a replica's
agent chose become its endpoints and its probes its readiness."""
from __future__ import annotations

from corral.api.services import ServiceSpec
from corral.controller.agent_events import engine_event, replica_launch
from corral.engine import events as ev
from corral.engine.records import JobState
from corral.protocol import (
    InfrastructureFailure,
    NodeFinished,
    NodeStarted,
    NodeUnhealthy,
    ProbesReported,
    ProbeStatus,
    TaskExit,
)
from tests.agent.conftest import build_launch
from tests.engine.builders import T0, engine_with_nodes

PROBED = {"name": "web", "command": ["serve"], "replicas": 1, "workdir": "/srv",
          "ports": [{"name": "http"}, {"name": "admin", "port": 9001}],
          "probes": {"readiness": {"http": {"path": "/ready", "port": "http"}, "period_s": 2},
                     "liveness": {"tcp": {"port": "admin"}, "failure_threshold": 4}}}


def test_a_replicas_launch_carries_its_ports_in_order_and_its_probes():
    launch = replica_launch(build_launch("/srv"), ServiceSpec(**PROBED))
    assert [(p.name, p.port) for p in launch.ports] == [("http", 0), ("admin", 9001)]
    assert launch.probes is not None and launch.probes.startup is None
    assert launch.probes.readiness.http.path == "/ready" and launch.probes.readiness.http.port == "http"
    assert launch.probes.readiness.period_s == 2
    assert launch.probes.liveness.tcp.port == "admin" and launch.probes.liveness.failure_threshold == 4


def test_a_replica_without_probes_launches_with_none():
    launch = replica_launch(build_launch("/srv"), ServiceSpec(name="plain", command=["serve"], workdir="/srv"))
    assert launch.ports == [] and launch.probes is not None
    assert (launch.probes.startup, launch.probes.readiness, launch.probes.liveness) == (None, None, None)


def test_a_start_carries_its_ports_and_run_and_a_batch_start_none():
    started = engine_event("node1", NodeStarted(job_id=5, pids=[10], restart_count=2, ports={"http": 41000}))
    assert started == ev.TasksStarted("node1", 5, 2, ports={"http": 41000})
    assert engine_event("node1", NodeStarted(job_id=6)) == ev.TasksStarted("node1", 6, None, ports=None)


def test_probe_reports_keep_each_probes_count_and_words():
    report = ProbesReported(job_id=5, restart_count=1, ready=False, results=[
        ProbeStatus(probe="liveness", ok=False, consecutive=3, detail="HTTP 500", restart=True),
        ProbeStatus(probe="readiness", ok=False, consecutive=2, detail="connection refused")])
    assert engine_event("node2", report) == ev.ProbesReported(5, "node2", {
        "liveness": ev.ProbeResult(False, 3, "HTTP 500"),
        "readiness": ev.ProbeResult(False, 2, "connection refused")}, 1)


def test_ready_without_a_readiness_result_reads_as_readiness_passed():
    """A replica with only a startup probe is ready once it passes: the agent says `ready`, no readiness."""
    report = ProbesReported(job_id=5, ready=True, results=[ProbeStatus(probe="startup", ok=True, consecutive=1)])
    event = engine_event("node1", report)
    assert event.results == {"startup": ev.ProbeResult(True, 1, ""), "readiness": ev.ProbeResult(True, 1, "")}
    not_ready = engine_event("node1", ProbesReported(job_id=5, ready=False, results=[
        ProbeStatus(probe="startup", ok=False, consecutive=5, detail="timed out after 1 s", restart=True)]))
    assert "readiness" not in not_ready.results


def test_ends_unhealthy_nodes_and_infrastructure_failures_cross_unchanged():
    finished = NodeFinished(job_id=5, tasks=[TaskExit(rank=0, exit_code=0, signal=9)], error=None, oom_killed=True,
                            restart_count=1, infrastructure=InfrastructureFailure(kind="leader-killed", reason="gone"))
    event = engine_event("node1", finished)
    assert isinstance(event, ev.TasksFinished)
    assert (event.tasks, event.oom_killed, event.restart_count) == (((0, 0, 9),), True, 1)
    assert (event.infrastructure.kind, event.infrastructure.reason) == ("leader-killed", "gone")
    assert engine_event("node3", NodeUnhealthy(reason="disk full")) == ev.NodeUnhealthy("node3", "disk full")


def test_through_a_real_engine_the_agents_ports_become_endpoints_and_its_probes_readiness():
    engine = engine_with_nodes(count=1)
    engine.apply_service(ServiceSpec(**PROBED), T0)
    engine.schedule(T0)
    [replica] = [job for job in engine.jobs.values() if job.spec.service == "web"]
    node = replica.node_names[0]
    engine.handle(engine_event(node, NodeStarted(job_id=replica.id, restart_count=0,
                                                 ports={"http": 41234, "admin": 9001})), now=T0 + 1)
    assert replica.state is JobState.RUNNING and not replica.ready, "a readiness probe gates it"
    assert replica.endpoints == {node: {"http": 41234, "admin": 9001}}
    engine.handle(engine_event(node, ProbesReported(job_id=replica.id, restart_count=0, ready=True, results=[
        ProbeStatus(probe="readiness", ok=True, consecutive=1)])), now=T0 + 2)
    assert replica.ready
