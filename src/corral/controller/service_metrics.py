"""The services' gauges on /metrics (docs/metrics.md), read from the engine at scrape time like the other
gauges (controller/metrics_collector.py): per service, the replicas it wants, those ready, its replicas'
jobs by state, their restarts and its revision. What the gateway sees (requests, errors, latency) the
gateway exports itself (corral_service_requests_total, ...: docs/decisions/0018-service-gateway.md)."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

from corral.controller.service_views import is_ready, replicas_of
from corral.engine.records import Job, Service

REPLICA_STATES = ("PENDING", "RUNNING", "COMPLETING")


def service_metrics(services: Mapping[str, Service], jobs: Iterable[Job]) -> Iterator[Metric]:
    current = {name: record for name, record in services.items() if not record.deleted}
    desired = GaugeMetricFamily("corral_service_replicas_desired", "Replicas the service wants now (its spec, "
                                "a scale or the autoscaler)", labels=["service"])
    ready = GaugeMetricFamily("corral_service_replicas_ready", "Replicas running and ready (the gateway routes "
                              "to these)", labels=["service"])
    by_state = GaugeMetricFamily("corral_service_replicas", "The service's replica jobs by state",
                                 labels=["service", "state"])
    restarts = GaugeMetricFamily("corral_service_replica_restarts", "Restarts of the service's current replica "
                                 "jobs, summed (their restart counts)", labels=["service"])
    revision = GaugeMetricFamily("corral_service_revision", "The service's revision (+1 per changed spec)",
                                 labels=["service"])
    active = list(jobs)
    for name, record in sorted(current.items()):
        replicas = replicas_of(name, active)
        desired.add_metric([name], record.desired_replicas)
        ready.add_metric([name], sum(1 for job in replicas if is_ready(job)))
        for state in REPLICA_STATES:
            by_state.add_metric([name, state], sum(1 for job in replicas if job.state.value == state))
        restarts.add_metric([name], sum(job.restart_count for job in replicas))
        revision.add_metric([name], record.revision)
    yield from (desired, ready, by_state, restarts, revision)  # with no service: the families, empty
