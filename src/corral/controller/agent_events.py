"""What crosses between the agents' protocol and the engine: an agent's report as an engine event, and a
service replica's launch completed with its service's ports and probes."""
from __future__ import annotations

from corral.api.services import ServiceSpec
from corral.engine import events as ev
from corral.engine.records import InfrastructureFailure
from corral.protocol import InfrastructureFailure as AgentInfrastructureFailure
from corral.protocol import (
    LaunchJob,
    NodeFinished,
    NodeStarted,
    NodeUnhealthy,
    PortRequest,
    ProbesReported,
    ProbesSpec,
    StepFinished,
)

AgentReport = NodeStarted | NodeFinished | StepFinished | NodeUnhealthy | ProbesReported


def replica_launch(launch: LaunchJob, spec: ServiceSpec) -> LaunchJob:
    """A replica's launch with its service's named ports and its probes, in the protocol's shapes."""
    probes = ProbesSpec.model_validate(spec.probes.model_dump(exclude_none=True))
    ports = [PortRequest(name=port.name, port=port.port) for port in spec.ports]
    return launch.model_copy(update={"ports": ports, "probes": probes})


def engine_event(node: str, event: AgentReport) -> ev.Event:
    """An agent's report as the engine's event."""
    if isinstance(event, NodeStarted):
        return ev.TasksStarted(node, event.job_id, event.restart_count, ports=event.ports or None)
    if isinstance(event, ProbesReported):
        return _probes_event(node, event)
    if isinstance(event, NodeUnhealthy):
        return ev.NodeUnhealthy(node, event.reason)
    tasks = tuple((t.rank, t.exit_code, t.signal) for t in event.tasks)
    usage = event.usage.model_dump() if event.usage is not None else None
    failure = _failure(event.infrastructure)
    if isinstance(event, NodeFinished):
        return ev.TasksFinished(node, event.job_id, tasks, event.error, event.oom_killed, usage=usage,
                                fenced=event.fenced, restart_count=event.restart_count, infrastructure=failure)
    return ev.StepTasksFinished(node, event.job_id, event.step_id, tasks, event.error, event.oom_killed, usage,
                                infrastructure=failure)


def _probes_event(node: str, event: ProbesReported) -> ev.ProbesReported:
    """The flipped probes; a replica the agent calls ready without a readiness probe (its startup passed, or it
    has none) is ready as far as the engine is concerned."""
    results: dict[str, ev.ProbeResult] = {status.probe: ev.ProbeResult(status.ok, status.consecutive, status.detail)
                                          for status in event.results}
    if event.ready and "readiness" not in results:
        results["readiness"] = ev.ProbeResult(True, 1, "")
    return ev.ProbesReported(event.job_id, node, results, event.restart_count)


def _failure(reported: AgentInfrastructureFailure | None) -> InfrastructureFailure | None:
    return None if reported is None else InfrastructureFailure(reported.kind, reported.reason)
