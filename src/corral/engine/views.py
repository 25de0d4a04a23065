"""The core's per-job views, kept up to date between cycles instead of rebuilt for 100,000 jobs.

Pending views carry the multifactor priority, recomputed every `calc_period_s` (as Slurm's
PriorityCalcPeriod) rather than every cycle; running views carry what preemption and limits need.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from corral.core.model import AdvanceReservation, PendingJob, RunningJob
from corral.engine.config import EngineConfig
from corral.engine.node_choice import allowed_nodes, needed_features
from corral.engine.priority import Factors, job_priority
from corral.engine.records import Job, JobSpec, JobState, Node
from corral.engine.tenancy import Tenancy


class Views:
    def __init__(self, config: EngineConfig, nodes: Mapping[str, Node]) -> None:
        self.config = config
        self.nodes = nodes  # the engine's node records (read only here)
        self.pending: dict[int, PendingJob] = {}
        self.running: dict[int, RunningJob] = {}
        self.factors: dict[int, Factors] = {}
        self.priority_at = float("-inf")
        self._cluster_gpus: int | None = None
        self._partition_factors: dict[str, float] | None = None
        self._chosen: dict[tuple[str, str, str, str, frozenset[str]], frozenset[str]] = {}

    def cluster_gpus(self) -> int:
        if self._cluster_gpus is None:
            self._cluster_gpus = sum(len(n.gpus) for n in self.nodes.values())
        return self._cluster_gpus

    def partition_factors(self) -> dict[str, float]:
        if self._partition_factors is None:  # the partitions are fixed for the engine's life
            self._partition_factors = self.config.partition_factors()
        return self._partition_factors

    def nodes_changed(self, jobs: Mapping[int, Job]) -> None:
        """A node (re)joined: waiting jobs that chose nodes see it (its features may meet their --constraint,
        a -x leaves it open to them)."""
        self._cluster_gpus = None
        self._chosen.clear()
        for job_id, view in list(self.pending.items()):
            job = jobs.get(job_id)
            if view.nodes is not None and job is not None:
                self.pending[job_id] = replace(view, nodes=self.chosen_nodes(job.spec))

    def chosen_nodes(self, spec: JobSpec) -> frozenset[str] | None:
        """The nodes a job's -w/-x/--constraint allow among its partition's (None: any), shared by the jobs
        that chose alike (an array's tasks)."""
        needs = needed_features(spec.container_image)
        if not (spec.nodelist or spec.exclude or spec.constraint or needs):
            return None
        key = (spec.request.partition, spec.nodelist, spec.exclude, spec.constraint, needs)
        found = self._chosen.get(key)
        if found is None:
            partition = spec.request.partition
            members = (n for n in self.nodes.values() if partition in n.partitions)
            found = self._chosen[key] = allowed_nodes(spec.nodelist, spec.exclude, spec.constraint, members, needs) \
                or frozenset()
        return found

    def pending_view(self, job: Job, now: float, tenancy: Tenancy, shares: dict[str, float],
                     claim: bool) -> PendingJob:
        factors = job_priority(job, now, tenancy, shares, self.cluster_gpus(), self.partition_factors())
        self.factors[job.id] = factors
        spec = job.spec
        reservation = hold_name(job.id) if job.hold_nodes else spec.reservation
        view = PendingJob(job.id, factors.total, job.submit_time, spec.request, held=job.held, user=spec.user,
                          account=spec.account, queue=spec.queue, qos=spec.qos, caps=tenancy.caps(spec),
                          preempts_qos=tenancy.preempts(spec), reservation=reservation, claim=claim,
                          expedited=job.expedited, ignores_budgets=tenancy.overrides_min_ready(spec),
                          group=spec.service, max_per_node=spec.max_per_node,
                          spread_replicas=spec.spread_replicas, nodes=self.chosen_nodes(spec),
                          exclusive=spec.exclusive)
        self.pending[job.id] = view
        return view

    def refresh_priorities(self, jobs: Mapping[int, Job], now: float, tenancy: Tenancy, shares: dict[str, float],
                           claims: Mapping[int, object], rebuild: bool = False) -> None:
        """New priorities for every pending job (its age and its account's fair share moved on); with
        `rebuild`, whole new views (the tenancy changed: limits, QOS)."""
        gpus = self.cluster_gpus()  # once, not once per pending job
        partitions = self.partition_factors()
        for job_id, view in list(self.pending.items()):
            job = jobs[job_id]
            claim = job_id in claims
            if rebuild:
                self.pending_view(job, now, tenancy, shares, claim)
                continue
            factors = self.factors[job_id] = job_priority(job, now, tenancy, shares, gpus, partitions)
            if (factors.total, claim, job.held) != (view.priority, view.claim, view.held):
                self.pending[job_id] = replace(view, priority=factors.total, claim=claim, held=job.held)
        self.priority_at = now

    def running_view(self, job: Job, tenancy: Tenancy) -> RunningJob:
        factors = self.factors.get(job.id)
        completing = job.state is JobState.COMPLETING
        first = self.nodes.get(job.slices[0].node) if job.slices else None
        model = first.gpus[0].model if first is not None and first.gpus and job.gpu_count else ""
        view = RunningJob(job.id, expected_end(job), job.slices, priority=factors.total if factors else 0,
                          queue=job.spec.queue, qos=job.spec.qos, start_time=job.run_start,
                          preemptible_from=tenancy.preemptible_from(job), charges=tenancy.charges(job),
                          completing=completing, gpu_model=model, budget_group=job.spec.service)
        self.running[job.id] = view
        return view

    def forget(self, job_id: int) -> None:
        self.pending.pop(job_id, None)
        self.running.pop(job_id, None)


def hold_name(job_id: int) -> str:
    """The name of the hold on an expedited job's healthy nodes, as the core sees it (an AdvanceReservation
    with a holder). User-made reservation names cannot contain ':'."""
    return f"expedite:{job_id}"


def hold_reservation(job: Job) -> AdvanceReservation:
    """The hold as the core takes it. It began when the job was requeued; 0.0 stands for that: the core
    only needs it to have begun."""
    assert job.hold_until is not None, f"job {job.id} holds no nodes"
    return AdvanceReservation(hold_name(job.id), 0.0, job.hold_until, frozenset(job.hold_nodes), holder=job.id)


def expected_end(job: Job) -> float:
    """When a running job's resources are expected back: start + time limit, or once it is being stopped,
    its kill deadline."""
    if job.state is JobState.COMPLETING:
        return job.kill_deadline or job.run_start
    return job.run_start + job.spec.request.time_limit_s
