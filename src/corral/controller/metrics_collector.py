"""The gauges on /metrics, read from the engine at scrape time: jobs by state, GPUs and nodes, quota,
borrowing and lending, fair share, and the running jobs the agents' latest samples show with idle GPUs
(LiveUsage, against gpu_idle_flag_s). Nothing is kept between scrapes, so nothing can drift from what
squeue, sinfo and the API show. Names follow Slurm 25.11's OpenMetrics endpoint (slurm_*) and Kueue
(kueue_*) where the meaning matches, corral_* elsewhere; docs/metrics.md has the table.

A scrape runs on the controller's event loop (as every API read does), so it sees one consistent
engine; it costs one pass over the active jobs and one over the nodes.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from corral.controller.service_metrics import service_metrics
from corral.controller.usage_views import LiveUsage, combine, gpu_idle_flagged
from corral.core.model import QueueQuota
from corral.core.quota import QuotaBook
from corral.engine.membership import node_state
from corral.engine.records import JobState
from corral.engine.snapshot import node_usage

if TYPE_CHECKING:
    from corral.controller.metrics import ControllerMetrics
    from corral.engine.engine import Engine

ACTIVE_STATES = (JobState.PENDING, JobState.RUNNING, JobState.COMPLETING)
# corral_gpus' `state` label: every GPU is in exactly one.
GPU_STATES = ("allocated", "idle", "drained", "down")
# Slurm's aggregate node gauges, by the state corral's sinfo shows (engine.membership.node_state).
NODE_STATE_GAUGES = {"idle": "slurm_nodes_idle", "allocated": "slurm_nodes_alloc", "mixed": "slurm_nodes_mixed",
                     "down": "slurm_nodes_down", "drained": "slurm_nodes_drained",
                     "draining": "slurm_nodes_draining"}
MIB = 1024 * 1024


class EngineCollector(Collector):
    """`engine()` returns the engine, or None on a controller that does not lead (a standby, or one
    rebuilding its engine): then only corral_controller_leader (0) and the cycle figures are exported.
    `live`: the running jobs' latest samples (the service's)."""

    def __init__(self, engine: Callable[[], Engine | None], metrics: ControllerMetrics, live: LiveUsage) -> None:
        self.engine = engine
        self.metrics = metrics
        self.live = live

    def describe(self) -> list[Metric]:
        return []  # the families vary with the engine: no collect() at registration, no fixed list

    def collect(self) -> Iterator[Metric]:
        engine = self.engine()
        yield _gauge("corral_controller_leader", "1 while this controller leads (has the engine), else 0",
                     1 if engine is not None else 0)
        yield from self._cycle_figures()
        if engine is None:
            return
        yield from job_metrics(engine)
        yield from idle_metrics(engine, self.live)
        yield from node_metrics(engine)
        yield from quota_metrics(engine.tenancy.queues, engine.views.running.values())
        yield from fairshare_metrics(engine)
        yield from service_metrics(engine.services, engine.jobs.values())

    def _cycle_figures(self) -> Iterator[Metric]:
        m = self.metrics
        yield _gauge("slurm_schedule_cycle_cnt", "Scheduling cycles since the controller started", m.cycle_count)
        yield _gauge("slurm_schedule_cycle_last", "Last scheduling cycle's time (microseconds)", m.cycle_last_us)
        yield _gauge("slurm_schedule_cycle_max", "Longest scheduling cycle's time (microseconds)", m.cycle_max_us)


def job_metrics(engine: Engine) -> Iterator[Metric]:
    counts: dict[tuple[JobState, str, str, str], int] = {}
    gpus: dict[tuple[str, str], int] = {}  # (partition, account) -> GPUs held by running and completing jobs
    held = 0
    for job in engine.jobs.values():
        spec = job.spec
        key = (job.state, spec.request.partition, spec.queue, spec.account)
        counts[key] = counts.get(key, 0) + 1
        if job.slices:
            where = (spec.request.partition, spec.account)
            gpus[where] = gpus.get(where, 0) + job.gpu_count
        held += job.held and job.state is JobState.PENDING
    family = GaugeMetricFamily("corral_jobs", "Active jobs (what squeue lists) by state, partition, queue, account",
                               labels=["state", "partition", "queue", "account"])
    for (state, partition, queue, account), n in sorted(counts.items()):
        family.add_metric([state.value, partition, queue, account], n)
    yield family
    yield from _slurm_job_gauges(counts, gpus, held)
    yield from _kueue_workload_gauges(counts)


def idle_metrics(engine: Engine, live: LiveUsage) -> Iterator[Metric]:
    """The running jobs flagged for idle GPUs (views.job_out's gpu_idle_flagged) and the GPUs they hold, by
    partition and account; per node, the allocated GPUs whose job's samples there say idle that long."""
    flag_s = engine.config.gpu_idle_flag_s
    jobs: dict[tuple[str, str], list[int]] = {}  # (partition, account) -> [flagged jobs, their GPUs]
    nodes: dict[str, int] = {}
    for job_id in live.job_ids():
        job = engine.jobs.get(job_id)
        per_node = live.of(job_id).get(None)
        if job is None or job.state is not JobState.RUNNING or not per_node:
            continue
        for node, usage in per_node.items():
            if gpu_idle_flagged(usage, flag_s):
                nodes[node] = nodes.get(node, 0) + usage["gpus"]
        if gpu_idle_flagged(combine(per_node), flag_s):
            row = jobs.setdefault((job.spec.request.partition, job.spec.account), [0, 0])
            row[0] += 1
            row[1] += job.gpu_count
    families = [GaugeMetricFamily("corral_jobs_gpu_idle", "Running jobs whose GPUs have stayed under 5 % "
                                  "utilisation for gpu_idle_flag_s or longer", labels=["partition", "account"]),
                GaugeMetricFamily("corral_jobs_gpu_idle_gpus", "GPUs held by the running jobs flagged idle",
                                  labels=["partition", "account"])]
    for key, row in sorted(jobs.items()):
        for family, n in zip(families, row, strict=True):
            family.add_metric(list(key), n)
    yield from families
    by_node = GaugeMetricFamily("corral_node_gpus_idle", "Allocated GPUs of the node that its job's samples "
                                 "there show under 5 % for gpu_idle_flag_s or longer", labels=["node"])
    for node, n in sorted(nodes.items()):
        by_node.add_metric([node], n)
    yield by_node


def _slurm_job_gauges(counts, gpus, held: int) -> Iterator[Metric]:
    by_state = {state: 0 for state in ACTIVE_STATES}
    by_partition: dict[str, dict[JobState, int]] = {}
    by_account: dict[str, dict[JobState, int]] = {}
    for (state, partition, _queue, account), n in counts.items():
        by_state[state] += n
        for table, name in ((by_partition, partition), (by_account, account)):
            row = table.setdefault(name, {s: 0 for s in ACTIVE_STATES})
            row[state] += n
    yield _gauge("slurm_jobs", "Active jobs", sum(by_state.values()))
    for state in ACTIVE_STATES:
        yield _gauge(f"slurm_jobs_{state.value.lower()}", f"Jobs in {state.value} state", by_state[state])
    yield _gauge("slurm_jobs_hold", "Pending jobs held (by a user or an admin)", held)
    yield _gauge("slurm_jobs_gpus_alloc", "GPUs allocated to jobs", sum(gpus.values()))
    for scope, label, table in (("partition", "partition", by_partition), ("account", "account", by_account)):
        total = GaugeMetricFamily(f"slurm_{scope}_jobs", f"Active jobs per {scope}", labels=[label])
        for name, row in sorted(table.items()):
            total.add_metric([name], sum(row.values()))
        yield total
        for state in ACTIVE_STATES:
            family = GaugeMetricFamily(f"slurm_{scope}_jobs_{state.value.lower()}",
                                       f"Jobs in {state.value} state per {scope}", labels=[label])
            for name, row in sorted(table.items()):
                family.add_metric([name], row[state])
            yield family
        alloc = GaugeMetricFamily(f"slurm_{scope}_jobs_gpus_alloc", f"GPUs allocated to jobs per {scope}",
                                  labels=[label])
        index = 0 if scope == "partition" else 1
        summed: dict[str, int] = {name: 0 for name in table}
        for key, n in gpus.items():
            summed[key[index]] = summed.get(key[index], 0) + n
        for name, n in sorted(summed.items()):
            alloc.add_metric([name], n)
        yield alloc


def _kueue_workload_gauges(counts) -> Iterator[Metric]:
    pending: dict[str, int] = {}
    admitted: dict[str, int] = {}
    for (state, _partition, queue, _account), n in counts.items():
        if not queue:
            continue
        table = pending if state is JobState.PENDING else admitted
        table[queue] = table.get(queue, 0) + n
    family = GaugeMetricFamily("kueue_pending_workloads", "Pending jobs per quota queue (all counted as active)",
                               labels=["cluster_queue", "status"])
    for queue, n in sorted(pending.items()):
        family.add_metric([queue, "active"], n)
    yield family
    family = GaugeMetricFamily("kueue_admitted_active_workloads", "Running and completing jobs per quota queue",
                               labels=["cluster_queue"])
    for queue, n in sorted(admitted.items()):
        family.add_metric([queue], n)
    yield family


def node_metrics(engine: Engine) -> Iterator[Metric]:
    usage = node_usage(engine.active, engine.nodes)
    per_node = {name: GaugeMetricFamily(name, text, labels=["node"]) for name, text in (
        ("slurm_node_gpus", "GPUs in the node"), ("slurm_node_gpus_alloc", "Allocated GPUs in the node"),
        ("slurm_node_cpus", "CPUs in the node"), ("slurm_node_cpus_alloc", "Allocated CPUs in the node"),
        ("slurm_node_memory_bytes", "Memory of the node"),
        ("slurm_node_memory_alloc_bytes", "Memory allocated to jobs in the node"))}
    gpus = GaugeMetricFamily("corral_gpus", "GPUs by node, model and state (allocated, idle, drained, down)",
                             labels=["node", "model", "state"])
    states = {state: 0 for state in NODE_STATE_GAUGES}
    drain_flag = 0
    partitions: dict[str, list[int]] = {p.name: [0, 0] for p in engine.config.partitions}  # [nodes, gpus]
    for name in sorted(engine.nodes):
        node = engine.nodes[name]
        devices, cpus, mem = usage.get(name, (set(), 0, 0))
        state = node_state(node, len(devices), cpus)
        states[state] += 1
        drain_flag += node.drain
        for family, value in zip(per_node.values(), (len(node.gpus), len(devices), node.cpus, cpus,
                                                     node.mem_mib * MIB, mem * MIB), strict=True):
            family.add_metric([name], value)
        free_state = "down" if not node.up else "drained" if node.drain else "idle"
        by_model: dict[tuple[str, str], int] = {}
        for gpu in node.gpus:
            key = (gpu.model, "allocated" if gpu.index in devices else free_state)
            by_model[key] = by_model.get(key, 0) + 1
        for (model, gpu_state), n in sorted(by_model.items()):
            gpus.add_metric([name, model, gpu_state], n)
        for partition in node.partitions:
            if partition in partitions:
                partitions[partition][0] += 1
                partitions[partition][1] += len(node.gpus)
    yield from per_node.values()
    yield gpus
    yield _gauge("slurm_nodes", "Nodes", len(engine.nodes))
    for state, metric in NODE_STATE_GAUGES.items():
        yield _gauge(metric, f"Nodes in state {state} (as sinfo shows)", states[state])
    yield _gauge("slurm_nodes_drain", "Nodes with the drain flag (drained or draining)", drain_flag)
    for index, (metric, text) in enumerate((("slurm_partition_nodes", "Nodes in the partition"),
                                            ("slurm_partition_gpus", "GPUs in the partition"))):
        family = GaugeMetricFamily(metric, text, labels=["partition"])
        for partition, row in sorted(partitions.items()):
            family.add_metric([partition], row[index])
        yield family


def quota_metrics(queues: tuple[QueueQuota, ...], running) -> Iterator[Metric]:
    """Kueue's ClusterQueue gauges, and how much each queue borrows from and lends to its cohort."""
    labels = ["cohort", "cluster_queue", "flavor", "resource"]
    families = {name: GaugeMetricFamily(name, text, labels=labels) for name, text in (
        ("kueue_cluster_queue_nominal_quota", "Nominal quota"),
        ("kueue_cluster_queue_resource_usage", "Quota used by running and completing jobs"),
        ("kueue_cluster_queue_borrowing_limit", "Borrowing limit (only where one is set)"),
        ("kueue_cluster_queue_lending_limit", "Lending limit (only where one is set)"),
        ("corral_queue_borrowed", "Quota used beyond nominal: borrowed from the cohort"),
        ("corral_queue_lent", "Lendable quota other queues of the cohort use (their borrowing, shared out "
                              "in proportion to each lender's idle lendable quota)"))}
    cohort_borrowed = GaugeMetricFamily("corral_cohort_borrowed", "Quota borrowed within the cohort",
                                        labels=["cohort", "flavor", "resource"])
    if not queues:
        yield from families.values()
        yield cohort_borrowed
        return
    book = QuotaBook(queues, running)
    borrowed = {(q.name, r): max(0.0, book.usage[q.name][r] - n) for q in queues for r, n in q.nominal.items()}
    lent = _lent(queues, book, borrowed)
    totals: dict[tuple[str, str], float] = {}
    for q in queues:
        cohort = q.cohort or ""
        for r, nominal in q.nominal.items():
            row = [cohort, q.name, *_flavor_resource(r)]
            families["kueue_cluster_queue_nominal_quota"].add_metric(row, nominal)
            families["kueue_cluster_queue_resource_usage"].add_metric(row, book.usage[q.name][r])
            if r in q.borrowing_limit:
                families["kueue_cluster_queue_borrowing_limit"].add_metric(row, q.borrowing_limit[r])
            if r in q.lending_limit:
                families["kueue_cluster_queue_lending_limit"].add_metric(row, q.lending_limit[r])
            if q.cohort is not None:
                families["corral_queue_borrowed"].add_metric(row, borrowed[q.name, r])
                families["corral_queue_lent"].add_metric(row, lent.get((q.name, r), 0.0))
                totals[q.cohort, r] = totals.get((q.cohort, r), 0.0) + borrowed[q.name, r]
    for (cohort, r), amount in sorted(totals.items()):
        cohort_borrowed.add_metric([cohort, *_flavor_resource(r)], amount)
    yield from families.values()
    yield cohort_borrowed


def _lent(queues, book: QuotaBook, borrowed) -> dict[tuple[str, str], float]:
    """What each queue lends: its cohort's borrowing of a resource, shared among the queues with idle
    lendable quota of it, in proportion to that idle quota (the pool has no record of who lent what;
    this split never exceeds a lender's idle quota, since the pool admits no more borrowing than that)."""
    idle: dict[tuple[str, str], dict[str, float]] = {}
    demand: dict[tuple[str, str], float] = {}
    for q in queues:
        if q.cohort is None:
            continue
        for r, nominal in q.nominal.items():
            lendable = min(nominal, q.lending_limit.get(r, nominal))
            pooled = max(0.0, book.usage[q.name][r] - (nominal - lendable))
            idle.setdefault((q.cohort, r), {})[q.name] = max(0.0, lendable - pooled)
            demand[q.cohort, r] = demand.get((q.cohort, r), 0.0) + borrowed[q.name, r]
    lent: dict[tuple[str, str], float] = {}
    for key, lenders in idle.items():
        spare = sum(lenders.values())
        if spare > 0 and demand[key] > 0:
            for name, amount in lenders.items():
                lent[name, key[1]] = demand[key] * amount / spare
    return lent


def _flavor_resource(resource: str) -> tuple[str, str]:
    """corral's quota resource as Kueue's (flavor, resource): "gpu:h100" -> ("h100", "gpu"); "cpu" -> ("", "cpu")."""
    kind, _, flavor = resource.partition(":")
    return flavor, kind


def fairshare_metrics(engine: Engine) -> Iterator[Metric]:
    rows = engine.fairshare.report()
    families = [(GaugeMetricFamily(name, text, labels=["account"]), key) for name, text, key in (
        ("corral_fairshare_factor", "Fair-share factor, 0..1 (sshare's FairShare)", "fairshare"),
        ("corral_fairshare_norm_shares", "Normalized shares (sshare's NormShares)", "norm_shares"),
        ("corral_fairshare_norm_usage", "Normalized decayed usage (sshare's EffectvUsage)", "norm_usage"),
        ("corral_fairshare_usage_billing_seconds", "Decayed usage of the account's subtree, billing-seconds "
                                                   "(sshare's RawUsage)", "raw_usage"))]
    for row in rows:
        for family, key in families:
            family.add_metric([row["account"]], row[key])
    for family, _key in families:
        yield family


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)
