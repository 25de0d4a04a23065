"""The gateway's Prometheus metrics (its own registry, served at the gateway's /metrics; docs/metrics.md)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Request latency from arrival to the last byte of the response (a stream counts its whole length).
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("corral_service_requests", "Requests answered through the gateway, by status code",
                                ["service", "code"], registry=r)
        self.errors = Counter("corral_service_errors",
                              "Requests the gateway could not complete (no ready replica, every replica failed, "
                              "a replica lost mid-response, authentication unavailable), by reason",
                              ["service", "reason"], registry=r)
        self.retries = Counter("corral_service_retries", "Idempotent requests sent again to another replica "
                               "after one failed before answering", ["service"], registry=r)
        self.inflight = Gauge("corral_service_inflight_requests", "Requests in flight through the gateway",
                              ["service"], registry=r)
        self.latency = Histogram("corral_service_request_duration_seconds",
                                 "Time from a request's arrival to the end of its response",
                                 ["service"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.ready_endpoints = Gauge("corral_service_ready_endpoints",
                                     "Ready replicas the gateway routes to", ["service"], registry=r)
        self.controller_up = Gauge("corral_gateway_controller_up",
                                   "1 when the last request to the controller was answered, else 0", registry=r)
