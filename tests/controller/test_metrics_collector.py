"""/metrics' gauges read from an engine (the collector) and the shell's counters, over engines the tests
drive through the harness."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from corral.api.tenancy import TenancySpec
from corral.controller.metrics import ControllerMetrics
from corral.controller.metrics_collector import EngineCollector
from corral.controller.usage_views import LiveUsage
from corral.core.model import Gpu, Request
from corral.engine import events as ev
from corral.engine.build import build_engine
from corral.engine.config import LIVE, EngineConfig
from corral.engine.membership import Inventory
from corral.engine.records import JobSpec
from corral.protocol import Usage, UsageReport
from tests.engine.builders import T0, engine_with_nodes, spec
from tests.engine.harness import Harness

TENANCY = TenancySpec(
    accounts=[{"name": "a"}, {"name": "b"}],
    users=[{"name": "alice", "accounts": ["a"]}, {"name": "bob", "accounts": ["b"]}],
    qos=[{"name": "normal"}],
    queues=[{"name": "qa", "cohort": "c", "accounts": ["a"], "nominal": {"gpu": 4}},
            {"name": "qb", "cohort": "c", "accounts": ["b"], "nominal": {"gpu": 4}, "lending_limit": {"gpu": 3}}],
)


def scrape(engine, metrics: ControllerMetrics | None = None,
           live: LiveUsage | None = None) -> dict[tuple[str, tuple], float]:
    """The exposition as Prometheus reads it: {(sample name, sorted labels): value}."""
    metrics = metrics or ControllerMetrics()
    registry = CollectorRegistry()
    registry.register(metrics.registry)  # the counters ...
    # ... and the gauges, as the app serves them
    registry.register(EngineCollector(lambda: engine, metrics, live or LiveUsage()))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def tenancy_engine() -> Harness:
    engine = Harness(build_engine(EngineConfig(start_delay_s=0.0), LIVE, tenancy=TENANCY))
    engine.register_node("n1", Inventory(tuple(Gpu(i, "NVIDIA H100") for i in range(8)), 64, 512_000, "127.0.0.1"),
                         set(), set(), T0)
    return engine


def tenant_spec(user: str, account: str, queue: str, gpus: int = 1) -> JobSpec:
    req = Request(num_nodes=1, gpus_per_node=gpus, time_limit_s=3600, partition="gpu")
    return JobSpec(name="j", user=user, request=req, argv=("true",), account=account, qos="normal", queue=queue)


def test_jobs_by_state_and_gpus_by_node_state_and_model() -> None:
    engine = engine_with_nodes(3, gpus=4)
    running = [engine.submit(spec(gpus=4), T0) for _ in range(2)]
    engine.schedule(T0 + 1)
    busy, other = (engine.jobs[j.id].slices[0].node for j in running)
    idle = ({"node1", "node2", "node3"} - {busy, other}).pop()
    engine.set_drain(idle, True, "repair", T0 + 2)  # nothing runs there: its GPUs are drained, not idle
    for _ in range(2):
        engine.submit(spec(gpus=4), T0 + 3)
    held = engine.submit(spec(gpus=1), T0 + 3, held=True)
    engine.schedule(T0 + 4)
    engine.set_drain(busy, True, "repair", T0 + 5)  # a job runs there: draining, its GPUs allocated
    samples = scrape(engine)

    assert [engine.jobs[j.id].state.value for j in running] == ["RUNNING", "RUNNING"]
    jobs = {"partition": "gpu", "queue": "", "account": ""}
    assert value(samples, "corral_jobs", state="RUNNING", **jobs) == 2
    assert value(samples, "corral_jobs", state="PENDING", **jobs) == 3
    assert value(samples, "slurm_jobs") == 5 and value(samples, "slurm_jobs_running") == 2
    assert value(samples, "slurm_jobs_pending") == 3 and value(samples, "slurm_jobs_hold") == 1
    assert value(samples, "slurm_partition_jobs_pending", partition="gpu") == 3
    assert value(samples, "slurm_account_jobs_running", account="") == 2
    assert value(samples, "slurm_jobs_gpus_alloc") == 8
    assert engine.jobs[held.id].held
    assert value(samples, "corral_gpus", node=busy, model="sim-gpu", state="allocated") == 4
    assert value(samples, "corral_gpus", node=idle, model="sim-gpu", state="drained") == 4
    assert value(samples, "corral_gpus", node=idle, model="sim-gpu", state="idle") is None
    assert value(samples, "slurm_node_gpus_alloc", node=other) == 4
    assert value(samples, "slurm_node_gpus_alloc", node=idle) == 0 and value(samples, "slurm_node_gpus", node=idle) == 4
    assert value(samples, "slurm_nodes") == 3 and value(samples, "slurm_nodes_alloc") == 1  # `other`
    assert value(samples, "slurm_nodes_draining") == 1 and value(samples, "slurm_nodes_drained") == 1
    assert value(samples, "slurm_nodes_drain") == 2 and value(samples, "slurm_nodes_idle") == 0
    assert value(samples, "slurm_partition_gpus", partition="gpu") == 12
    assert value(samples, "corral_controller_leader") == 1


def test_quota_borrowing_lending_and_fair_share() -> None:
    engine = tenancy_engine()
    for _ in range(6):  # qa: 4 of its own, 2 borrowed from qb's lendable 3
        engine.submit(tenant_spec("alice", "a", "qa"), T0)
    engine.submit(tenant_spec("bob", "b", "qb"), T0)
    engine.schedule(T0 + 1)
    engine.accrue_usage(T0 + 100)
    samples = scrape(engine)

    qa = {"cohort": "c", "cluster_queue": "qa", "flavor": "", "resource": "gpu"}
    qb = {**qa, "cluster_queue": "qb"}
    assert value(samples, "kueue_cluster_queue_nominal_quota", **qa) == 4
    assert value(samples, "kueue_cluster_queue_resource_usage", **qa) == 6
    assert value(samples, "kueue_cluster_queue_resource_usage", **qb) == 1
    assert value(samples, "kueue_cluster_queue_lending_limit", **qb) == 3
    assert value(samples, "kueue_cluster_queue_lending_limit", **qa) is None
    assert value(samples, "corral_queue_borrowed", **qa) == 2 and value(samples, "corral_queue_borrowed", **qb) == 0
    # qb's idle lendable quota is 3 - max(0, 1 - 1) = 3 and qa's 0: qb lends all that is borrowed.
    assert value(samples, "corral_queue_lent", **qb) == 2 and value(samples, "corral_queue_lent", **qa) == 0
    assert value(samples, "corral_cohort_borrowed", cohort="c", flavor="", resource="gpu") == 2
    assert value(samples, "kueue_admitted_active_workloads", cluster_queue="qa") == 6
    assert value(samples, "kueue_pending_workloads", cluster_queue="qb", status="active") is None
    a, b = (value(samples, "corral_fairshare_factor", account=name) for name in ("a", "b"))
    assert 0 < a < b < 1  # a used six times b's GPUs
    assert value(samples, "corral_fairshare_usage_billing_seconds", account="a") > 0


def test_running_jobs_whose_gpus_stay_idle_are_counted_by_partition_account_and_node() -> None:
    engine = engine_with_nodes(2, gpus=4, gpu_idle_flag_s=600)
    idle, busy = (engine.submit(spec(gpus=4), T0) for _ in range(2))
    engine.schedule(T0 + 1)
    idle_node, busy_node = (engine.jobs[j.id].slices[0].node for j in (idle, busy))
    live = LiveUsage()
    live.take(idle_node, [UsageReport(job_id=idle.id, usage=Usage(samples=30, gpus=4, gpu_idle_s=601))], engine.jobs)
    live.take(busy_node, [UsageReport(job_id=busy.id, usage=Usage(samples=30, gpus=4, gpu_idle_s=599))], engine.jobs)
    samples = scrape(engine, live=live)
    assert value(samples, "corral_jobs_gpu_idle", partition="gpu", account="") == 1
    assert value(samples, "corral_jobs_gpu_idle_gpus", partition="gpu", account="") == 4
    assert value(samples, "corral_node_gpus_idle", node=idle_node) == 4
    assert value(samples, "corral_node_gpus_idle", node=busy_node) is None

    off = engine_with_nodes(1, gpus=4, gpu_idle_flag_s=0)  # 0: nothing is flagged
    job = off.submit(spec(gpus=4), T0)
    off.schedule(T0 + 1)
    live = LiveUsage()
    live.take("node1", [UsageReport(job_id=job.id, usage=Usage(samples=30, gpus=4, gpu_idle_s=9999))], off.jobs)
    samples = scrape(off, live=live)
    assert not any(name.startswith(("corral_jobs_gpu_idle", "corral_node_gpus_idle")) for name, _ in samples)


def test_a_controller_without_engine_exports_its_role_and_no_job_gauges() -> None:
    samples = scrape(None)
    assert value(samples, "corral_controller_leader") == 0
    assert not any(name.startswith(("corral_jobs", "slurm_jobs", "corral_gpus", "kueue_")) for name, _ in samples)


def test_counters_count_starts_preemptions_and_requeues_from_what_the_engine_returns() -> None:
    engine = tenancy_engine()
    metrics = ControllerMetrics()
    jobs = [engine.submit(tenant_spec("alice", "a", "qa"), T0) for _ in range(7)]
    engine.schedule(T0 + 1)
    metrics.cycle_ran(0.002, engine.last_plan, engine)
    for job in (engine.submit(tenant_spec("bob", "b", "qb", gpus=3), T0 + 2),):
        assert job.state.value == "PENDING"
    engine.schedule(T0 + 3)  # qb takes back its nominal quota: qa's borrowed jobs are preempted
    metrics.cycle_ran(0.004, engine.last_plan, engine)
    victims = [j for j in jobs if engine.jobs[j.id].state.value == "COMPLETING"]
    for victim in victims:  # their tasks end: back to PENDING, requeued
        node = victim.slices[0].node
        result = engine.handle(ev.TasksFinished(node, victim.id, ((0, 0, 15),), None, False), now=T0 + 4)
        metrics.committed(result, T0 + 4)
    samples = scrape(engine, metrics)

    assert len(victims) == 2
    assert value(samples, "corral_jobs_started_total", partition="gpu", queue="qa") == 7
    assert value(samples, "corral_jobs_preempted_total", partition="gpu", queue="qa", cause="reclaim") == 2
    assert value(samples, "corral_jobs_requeued_total", partition="gpu", queue="qa", cause="preempted") == 2
    assert value(samples, "corral_scheduler_cycle_duration_seconds_count") == 2
    assert value(samples, "slurm_schedule_cycle_cnt") == 2 and value(samples, "slurm_schedule_cycle_max") == 4000


def test_infrastructure_failures_are_counted_once_each_by_kind_and_node() -> None:
    """From the history entries the committed Result carries: a job's (requeued) and a step's alike; a
    repeat of the agent's report, which changes nothing, counts nothing."""
    from corral.engine.records import InfrastructureFailure

    engine = tenancy_engine()
    metrics = ControllerMetrics()
    job = engine.submit(tenant_spec("alice", "a", "qa"), T0)
    engine.schedule(T0 + 1)
    killed = ev.TasksFinished("n1", job.id, ((0, 0, 9),), restart_count=0,
                              infrastructure=InfrastructureFailure("leader-killed", "task leader of rank 0 killed"))
    metrics.committed(engine.handle(killed, now=T0 + 2), T0 + 2)
    metrics.committed(engine.handle(killed, now=T0 + 3), T0 + 3)
    samples = scrape(engine, metrics)
    assert value(samples, "corral_infrastructure_failures_total", kind="leader-killed", node="n1") == 1
    assert value(samples, "corral_jobs_requeued_total", partition="gpu", queue="qa", cause="node-failed") == 1
