"""Trace jobs are submitted to the simulator as a user submits them (a JobSubmit the engine decides on, as
the live controller does) and are admitted as exactly the gang the simulator replayed before it went through
admission: the JobSpec built field by field from the trace job (kept below as the reference)."""
from __future__ import annotations

import dataclasses

import pytest

from corral.core.model import Request
from corral.engine.events import SubmissionRequested
from corral.engine.records import JobSpec
from corral.sim import experiment
from corral.sim.driver import SimNode, Simulation
from corral.sim.experiment import Policy
from corral.sim.traces.philly import philly_cluster, read_philly
from corral.sim.workload import Cluster, TraceJob, Workload

POLICIES = [Policy("isolated", isolated=True, backfill=True), Policy("cohort", isolated=False, backfill=True)]


def reference_spec(job: TraceJob, policy: Policy) -> JobSpec:
    """The spec the simulator built from a trace job before its submissions went through admission."""
    req = Request(num_nodes=job.num_nodes, tasks_per_node=1, gpus_per_node=job.gpus_per_node,
                  cpus_per_task=job.cpus_per_node, mem_per_node_mib=job.mem_per_node_mib,
                  time_limit_s=job.time_limit_s or int(job.duration_s) + 1,
                  partition=job.queue if policy.isolated else "gpu")
    return JobSpec(name=job.name or f"job{job.id}", user=job.user if not policy.isolated else "u", request=req,
                   argv=("true",), account="default" if policy.isolated else job.queue, qos="normal",
                   queue="" if policy.isolated else job.queue)


def admitted_specs(cluster: Cluster, workload: Workload, policy: Policy) -> list[JobSpec]:
    config, tenancy = experiment._engine_setup(cluster, policy)
    sim = Simulation(config, [SimNode(n.name, n.gpus, n.cpus, n.mem_mib) for n in cluster.nodes],
                     experiment._with_trace_users(tenancy, workload))
    specs = []
    for job in workload.jobs:
        request = experiment._submission(job, policy).request
        first, _ = sim.engine.handle(SubmissionRequested(request), now=0.0).reply
        specs.append(sim.engine.jobs[first].spec)
    return specs


def mixed_users_workload() -> tuple[Cluster, Workload]:
    """Users that are not their queue's name (accounting and sacct traces), several queues per user."""
    jobs = [TraceJob(id=i, submit_s=float(i), duration_s=100.0 + i, num_nodes=1 + i % 2, gpus_per_node=4,
                     gpu_milli=1000, cpus_per_node=1 + i % 3, mem_per_node_mib=1000 * i, gpu_model=None,
                     user=f"user{i % 3}", account=f"user{i % 3}", queue=("qa", "qb")[i % 2],
                     time_limit_s=None if i % 4 else 7200)
            for i in range(12)]
    return Cluster.uniform("u", {"qa": 2, "qb": 2}, gpus_per_node=8, cpus_per_node=16,
                           mem_per_node_mib=64_000), Workload(tuple(jobs), "mixed", "test")


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_mixed_trace_jobs_are_admitted_as_the_spec_built_from_them(policy: Policy) -> None:
    cluster, workload = mixed_users_workload()
    _check(admitted_specs(cluster, workload, policy), workload, policy)


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_philly_jobs_are_admitted_as_the_spec_built_from_them(policy: Policy) -> None:
    workload = read_philly().head(3000)
    _check(admitted_specs(philly_cluster(), workload, policy), workload, policy)


def _check(specs: list[JobSpec], workload: Workload, policy: Policy) -> None:
    for job, spec in zip(workload.jobs, specs, strict=True):
        # `explicit` says which of ntasks, ntasks_per_node and cpus_per_task the user gave; only a node
        # agent's environment reads it, and a simulation has none.
        assert dataclasses.replace(spec, explicit="") == reference_spec(job, policy), job
