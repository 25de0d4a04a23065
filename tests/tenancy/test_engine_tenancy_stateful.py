"""A stateful test of the engine with tenancy on: QOS preemption with requeue, manual requeue, holds and
signals mixed with the plain lifecycle, checking the engine's incremental indexes against the records."""
from __future__ import annotations

import signal
from collections import defaultdict

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from corral.api.tenancy import TenancySpec
from corral.core.model import Gpu, Request
from corral.engine.build import build_engine
from corral.engine.config import SIMULATED, EngineConfig
from corral.engine.engine import WrongState
from corral.engine.history import Requeued
from corral.engine.membership import Inventory
from corral.engine.records import JobSpec, JobState
from tests.engine.harness import Harness

T0 = 1000.0
TENANCY = TenancySpec(qos=[{"name": "low", "grace_s": 5}, {"name": "normal", "priority": 5},
                           {"name": "high", "priority": 10, "preempts": ["low"]}])


class TenantEngine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.engine = Harness(build_engine(EngineConfig(kill_grace_s=5), SIMULATED, tenancy=TENANCY))
        for name in ("n1", "n2"):
            self.engine.register_node(name, Inventory(tuple(Gpu(i) for i in range(4)), 16, 64_000, "x"),
                                      set(), set(), T0)
        self.now = T0

    def _ids(self, *states: JobState) -> list[int]:
        return sorted(j.id for j in self.engine.jobs.values() if j.state in states)

    @rule(qos=st.sampled_from(["low", "normal", "high"]), nodes=st.integers(1, 2), gpus=st.integers(1, 4),
          limit=st.sampled_from([30, 300]))
    def submit(self, qos, nodes, gpus, limit) -> None:
        req = Request(num_nodes=nodes, gpus_per_node=gpus, time_limit_s=limit, partition="gpu")
        self.engine.submit(JobSpec(name="j", user="u", request=req, argv=("true",), account="default", qos=qos),
                           self.now)

    @rule()
    def schedule(self) -> None:
        self.engine.schedule(self.now)

    @rule(data=st.data(), code=st.integers(0, 1))
    def a_node_reports_its_tasks_ended(self, data, code) -> None:
        live = [(j.id, n) for j in self.engine.jobs.values() for n, r in j.runs.items() if not r.finished]
        if live:
            job_id, node = data.draw(st.sampled_from(sorted(live)))
            self.engine.node_finished(node, job_id, [(0, code, 0)], None, self.now)

    @rule(data=st.data(), action=st.sampled_from(["cancel", "requeue", "hold", "release", "signal"]))
    def a_user_acts(self, data, action) -> None:
        if not self.engine.jobs:
            return
        job_id = data.draw(st.sampled_from(sorted(self.engine.jobs)))
        try:
            if action == "cancel":
                self.engine.cancel(job_id, self.now)
            elif action == "requeue":
                self.engine.requeue(job_id, self.now)
            elif action == "signal":
                self.engine.signal(job_id, signal.SIGUSR1, "full", self.now)
            else:
                self.engine.hold(job_id, action == "hold", self.now)
        except WrongState:
            pass

    @rule(seconds=st.sampled_from([1, 6, 40]))
    def time_passes(self, seconds) -> None:
        self.now += seconds
        self.engine.tick(self.now)

    @invariant()
    def usage_index_matches_the_records(self) -> None:
        held: dict[str, set[int]] = defaultdict(set)
        cpus: dict[str, int] = defaultdict(int)
        for job in self.engine.jobs.values():
            if job.state in (JobState.RUNNING, JobState.COMPLETING):
                for s in job.slices:
                    assert not (held[s.node] & set(s.gpus)), "a device held twice"
                    held[s.node] |= set(s.gpus)
                    cpus[s.node] += s.cpus
        for name in ("n1", "n2"):
            gpus, used_cpus, _ = self.engine.active.usage.of(name)
            assert gpus == held[name] and used_cpus == cpus[name]

    @invariant()
    def views_match_states(self) -> None:
        views = self.engine.views
        for job in self.engine.jobs.values():
            assert (job.id in views.pending) == (job.state is JobState.PENDING)
            assert (job.id in views.running) == (job.state in (JobState.RUNNING, JobState.COMPLETING))
        assert set(self.engine.claims) <= set(views.pending), "only waiting jobs hold claims"

    @invariant()
    def requeued_jobs_keep_their_accounting(self) -> None:
        for job in self.engine.jobs.values():
            runs = sum(1 for h in job.history if isinstance(h, Requeued))
            assert job.restart_count == runs
            assert job.prior_gpu_seconds >= 0


TenantEngine.TestCase.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)
TestTenantEngine = TenantEngine.TestCase
