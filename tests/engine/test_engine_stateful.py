"""A stateful test of the engine: random stimuli (submit, cancel, schedule, agent reports, infrastructure
failures, time passing, nodes lost and re-registering) with the invariants checked after every step."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from corral.engine import events as ev
from corral.engine.commands import Launch
from corral.engine.records import InfrastructureFailure, JobState
from tests.engine.builders import T0, engine_with_nodes, inventory, spec

NODES = ["node1", "node2", "node3"]


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.engine = engine_with_nodes(count=3, gpus=4, node_timeout_s=50, kill_grace_s=5)
        self.now = T0
        self.ever: dict[int, object] = {}

    @rule(nodes=st.integers(1, 3), gpus=st.integers(0, 4), limit=st.sampled_from([10, 60, 300]),
          requeue=st.sampled_from(["yes", "no", "expedite"]))
    def submit(self, nodes, gpus, limit, requeue) -> None:
        job_spec = replace(spec(nodes=nodes, gpus=gpus, limit_s=limit), requeue=requeue != "no",
                           expedited_requeue=requeue == "expedite")
        job = self.engine.submit(job_spec, self.now)
        self.ever[job.id] = job

    @rule()
    def schedule(self) -> None:
        jobs = self.engine.jobs
        held = {node: job_id for job_id in self.engine.active.holds for node in jobs[job_id].hold_nodes}
        for command in self.engine.schedule(self.now):
            if isinstance(command, Launch):
                for node in jobs[command.job_id].node_names:
                    assert held.get(node, command.job_id) == command.job_id, f"{node} is held for another job"

    @rule(data=st.data())
    def cancel(self, data) -> None:
        if self.engine.jobs:
            self.engine.cancel(data.draw(st.sampled_from(sorted(self.engine.jobs))), self.now)

    @rule(data=st.data(), code=st.integers(0, 2))
    def a_node_reports(self, data, code) -> None:
        running = [(j.id, n) for j in self.engine.jobs.values() for n, r in j.runs.items() if not r.finished]
        if running:
            job_id, node = data.draw(st.sampled_from(sorted(running)))
            self.engine.node_started(node, job_id, self.now)
            self.engine.node_finished(node, job_id, [(0, code, 0)], None, self.now)

    @rule(data=st.data(), kind=st.sampled_from(["leader-killed", "cgroup-removed"]))
    def corrals_machinery_fails_under_a_run(self, data, kind) -> None:
        running = [(j.id, n) for j in self.engine.jobs.values() for n, r in j.runs.items() if not r.finished]
        if running:
            job_id, node = data.draw(st.sampled_from(sorted(running)))
            job = self.engine.jobs[job_id]
            self.engine.handle(ev.TasksFinished(node, job_id, ((0, 0, 9),), restart_count=job.restart_count,
                                                infrastructure=InfrastructureFailure(kind, "gone")), now=self.now)
            assert job.state is not JobState.FAILED, "never the job's own failure"

    @rule(seconds=st.sampled_from([1, 15, 70]))
    def time_passes(self, seconds) -> None:
        self.now += seconds
        for name in NODES:
            if self.engine.nodes[name].up:
                self.engine.contact(name, self.now)
        self.engine.tick(self.now)

    @rule(name=st.sampled_from(NODES))
    def node_lost(self, name) -> None:
        if self.engine.nodes[name].up:
            self.engine.node_lost(name, self.now)

    @rule(name=st.sampled_from(NODES))
    def node_found_unhealthy(self, name) -> None:
        self.engine.node_unhealthy(name, "XID 79 on GPU 0 (GPU has fallen off the bus)", self.now)

    @rule(name=st.sampled_from(NODES))
    def operator_resumes(self, name) -> None:
        self.engine.set_drain(name, False, now=self.now)

    @rule(name=st.sampled_from(NODES))
    def node_reregisters_empty(self, name) -> None:
        self.engine.register_node(name, inventory(4), set(), set(), self.now)

    @invariant()
    def no_device_held_twice(self) -> None:
        held: dict[str, set[int]] = defaultdict(set)
        for job in self.engine.jobs.values():
            for s in job.slices:
                assert not (held[s.node] & set(s.gpus)), f"device on {s.node} held twice"
                held[s.node] |= set(s.gpus)

    @invariant()
    def states_are_consistent(self) -> None:
        for job in self.ever.values():
            in_memory = job.id in self.engine.jobs
            assert in_memory == (not job.state.terminal)
            if job.state is JobState.PENDING:
                assert job.slices == () and job.id in self.engine.pending
            else:
                assert job.id not in self.engine.pending
            if job.state in (JobState.RUNNING, JobState.COMPLETING):
                assert len(job.slices) == job.spec.request.num_nodes, "gangs are whole"
            if job.state.terminal:
                assert job.end_time is not None and job.end_time >= job.submit_time

    @invariant()
    def holds_belong_to_waiting_expedited_jobs(self) -> None:
        for job_id, until in self.engine.active.holds.items():
            job = self.engine.jobs[job_id]
            assert job.state is JobState.PENDING and job.expedited and job.hold_nodes and job.hold_until == until

    @invariant()
    def running_jobs_only_on_nodes_that_were_up(self) -> None:
        for job in self.engine.jobs.values():
            if job.state is JobState.RUNNING:
                for node, run in job.runs.items():
                    assert self.engine.nodes[node].up or run.finished


    @invariant()
    def nothing_runs_on_a_node_found_unhealthy(self) -> None:
        # The only drains here are health reports, which stop the gangs there; resuming clears them.
        for job in self.engine.jobs.values():
            if job.state is JobState.RUNNING:
                assert not any(self.engine.nodes[n].drain for n in job.node_names)


EngineMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestEngineStateful = EngineMachine.TestCase
