"""contrib/grafana/corral.json is a Grafana dashboard whose every query names metrics the controller
exports (a renamed metric would leave a panel silently empty)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from corral.controller.metrics import ControllerMetrics
from corral.controller.metrics_collector import EngineCollector
from corral.controller.usage_views import LiveUsage
from tests.controller.test_metrics_collector import tenancy_engine

DASHBOARD = Path(__file__).parents[2] / "contrib" / "grafana" / "corral.json"
METRIC = re.compile(r"\b(?:corral|slurm|kueue)_[a-z0-9_]+\b")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def exported_names() -> set[str]:
    """Every sample name a leading controller's scrape can carry (labelled counters and histograms with no
    sample yet included)."""
    metrics = ControllerMetrics()
    registry = CollectorRegistry()
    registry.register(metrics.registry)
    registry.register(EngineCollector(tenancy_engine, metrics, LiveUsage()))
    names = set()
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def queries(dashboard: dict) -> list[str]:
    found = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    found += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return found


def test_every_query_names_exported_metrics_only() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_names()
    assert {"corral_jobs", "corral_jobs_started_total", "corral_http_request_duration_seconds_bucket"} <= exported
    for query in queries(dashboard):
        named = set(METRIC.findall(query))
        assert named, f"no corral metric in {query!r}"
        assert named <= exported, f"{query!r} names {sorted(named - exported)}, which the controller does not export"


def test_it_is_a_dashboard_grafana_imports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] == "corral" and dashboard["uid"] and dashboard["schemaVersion"] >= 36
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) >= 10
    for panel in dashboard["panels"]:
        assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}", panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert "datasource" in variables
    for query in queries(dashboard):
        assert set(re.findall(r"\$(\w+)", query)) <= variables, query
