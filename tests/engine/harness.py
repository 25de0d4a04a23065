"""Tests drive the engine through its one entry, `Engine.handle`, with verbs that read well in a test.

Each verb hands over one event (or, for `schedule` and `tick`, one of the two a controller cycle sends)
and returns that event's reply or commands. The records, nodes and metadata keys each Result says changed
are collected until `take_dirty()`, as the controller would commit them. Reads go to the engine.
"""
from __future__ import annotations

from typing import Any

from corral.engine import events as ev
from corral.engine.engine import Engine
from corral.engine.records import Job, Node, Service
from corral.engine.result import Result


class Harness:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dirty_jobs: dict[int, Job] = {}
        self.dirty_nodes: dict[str, Node] = {}
        self.meta_dirty: set[str] = set()
        self.dirty_services: dict[str, Service] = {}
        self.forgotten_services: set[str] = set()
        self.results: list[Result] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def handle(self, *events: ev.Event, now: float) -> Result:
        result = self.engine.handle(*events, now=now)
        self.dirty_jobs.update((job.id, job) for job in result.jobs)
        self.dirty_nodes.update((node.name, node) for node in result.nodes)
        self.meta_dirty |= result.meta
        self.dirty_services.update((service.name, service) for service in result.services)
        self.forgotten_services.update(result.services_forgotten)
        return result

    def take_dirty(self) -> tuple[list[Job], list[Node]]:
        jobs, nodes = list(self.dirty_jobs.values()), list(self.dirty_nodes.values())
        self.dirty_jobs.clear()
        self.dirty_nodes.clear()
        return jobs, nodes

    def _reply(self, event: ev.Event, now: float) -> Any:
        return self.handle(event, now=now).reply

    def _commands(self, event: ev.Event, now: float) -> list:
        return self.handle(event, now=now).commands

    # ----- users

    def submit(self, spec, now: float, held: bool = False) -> Job:
        return self._reply(ev.JobSubmitted(spec, held), now)

    def cancel(self, job_id: int, now: float, uid: int | None = None) -> list:
        return self._commands(ev.CancelRequested(job_id, uid), now)

    def requeue(self, job_id: int, now: float) -> list:
        return self._commands(ev.RequeueRequested(job_id), now)

    def signal(self, job_id: int, signum: int, scope: str, now: float, uid: int | None = None) -> list:
        return self._commands(ev.SignalRequested(job_id, signum, scope, uid), now)

    def update(self, job_id: int, now: float, **changes) -> Job:
        return self._reply(ev.UpdateRequested(job_id, **changes), now)

    def hold(self, job_id: int, held: bool, now: float) -> Job:
        return self._reply(ev.HoldRequested(job_id, held), now)

    def start_step(self, job_id: int, request, now: float) -> tuple:
        result = self.handle(ev.StepRequested(job_id, request), now=now)
        return result.reply, result.commands

    def complete(self, job_id: int, exit_code: int, signum: int, now: float) -> list:
        return self._commands(ev.AllocationCompleted(job_id, exit_code, signum), now)

    # ----- agents

    def register_node(self, name: str, inventory, running, finished, now: float) -> tuple[list[int], list]:
        result = self.handle(ev.NodeRegistered(name, inventory, frozenset(running), frozenset(finished)), now=now)
        return result.reply, result.commands

    def contact(self, name: str, now: float) -> bool:
        return self._reply(ev.NodeContacted(name), now)

    def node_started(self, node: str, job_id: int, now: float) -> None:
        self.handle(ev.TasksStarted(node, job_id), now=now)

    def node_finished(self, node: str, job_id: int, tasks, error: str | None, now: float,
                      oom_killed: bool = False, usage=None) -> list:
        return self._commands(ev.TasksFinished(node, job_id, tuple(tasks), error, oom_killed, usage), now)

    def step_finished(self, node: str, job_id: int, step_id: int, tasks, error: str | None, now: float,
                      oom_killed: bool = False, usage=None) -> list:
        return self._commands(ev.StepTasksFinished(node, job_id, step_id, tuple(tasks), error, oom_killed, usage),
                              now)

    def node_lost(self, name: str, now: float) -> list:
        return self._commands(ev.NodeLost(name), now)

    def node_unhealthy(self, name: str, reason: str, now: float) -> list:
        return self._commands(ev.NodeUnhealthy(name, reason), now)

    # ----- services

    def apply_service(self, spec, now: float, user: str = "alice") -> Service:
        return self._reply(ev.ServiceApplied(spec, user), now)

    def scale_service(self, name: str, replicas: int, now: float) -> Service:
        return self._reply(ev.ServiceScaled(name, replicas), now)

    def restart_service(self, name: str, now: float) -> Service:
        return self._reply(ev.ServiceRestartRequested(name), now)

    def delete_service(self, name: str, now: float) -> list:
        return self._commands(ev.ServiceDeleted(name), now)

    def report_probes(self, job_id: int, node: str, now: float, **results: ev.ProbeResult) -> list:
        return self._commands(ev.ProbesReported(job_id, node, results), now)

    def report_load(self, name: str, inflight: float, rps: float, now: float) -> None:
        self.handle(ev.ServiceLoadReported(name, inflight, rps, now), now=now)

    # ----- operators, the controller and time

    def set_drain(self, name: str, drain: bool, reason: str = "", now: float = 0.0) -> Node:
        return self._reply(ev.DrainRequested(name, drain, reason), now)

    def set_tenancy(self, spec, now: float) -> None:
        self.handle(ev.TenancyChanged(spec), now=now)

    def add_reservation(self, spec, now: float):
        return self._reply(ev.ReservationAdded(spec), now)

    def remove_reservation(self, name: str, now: float = 0.0) -> None:
        self.handle(ev.ReservationRemoved(name), now=now)

    def stop_cluster(self, now: float):
        return self._reply(ev.ClusterStopRequested(), now)

    def discount_stall(self, stall_s: float, now: float) -> None:
        self.handle(ev.ListenerStalled(stall_s), now=now)

    def accrue_usage(self, now: float) -> None:
        self.handle(ev.UsageAccrualDue(), now=now)

    def tick(self, now: float) -> list:
        return self._commands(ev.TimePassed(), now)

    def schedule(self, now: float) -> list:
        return self._commands(ev.CycleDue(), now)

    def remember(self, job: Job) -> None:
        self.engine.life.remember(job)
