"""GET /metrics and GET / over the app: who may scrape, what a scrape shows (against what the job and
node lists show), API latency by route template, and a standby's answer."""
from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.controller.app import create_app
from corral.controller.auth import AuthSettings
from corral.controller.restore import restore_engine
from corral.controller.service import ControllerService
from corral.controller.settings import SettingsError, auth_from_dict
from corral.engine.config import LIVE
from corral.engine.records import JobState
from corral.store import Store
from tests.controller.conftest import CONFIG, SECRET, T0, job, node
from tests.controller.test_leadership import JOB, Controller, run


def app_of(directory: Path, auth: AuthSettings | None = None):
    store = Store.open(f"sqlite:///{directory / 'corral.db'}")
    store.save(jobs=[job(1, JobState.RUNNING), job(2, JobState.RUNNING, partition="debug", account="b"),
                     job(3), job(4, account="b"), job(5, JobState.COMPLETED)], nodes=[node("n1")])
    service = ControllerService(restore_engine(CONFIG, LIVE, store, T0 + 100), store, clock=lambda: T0 + 100)
    return create_app(service, SECRET, auth)


def get(app, *paths: str, credential: str | None = SECRET) -> list[httpx.Response]:
    headers = {"Authorization": f"Bearer {credential}"} if credential else {}

    async def call() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://controller",
                                     headers=headers) as client:
            return [await client.get(path) for path in paths]

    return asyncio.run(call())


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_index_points_at_the_api_docs_and_metrics(tmp_path: Path) -> None:
    [reply] = get(app_of(tmp_path), "/", credential=None)
    assert reply.status_code == 200
    body = reply.json()
    assert body["role"] == "leader" and body["cluster"] == CONFIG.cluster_name
    assert {body["links"][k] for k in ("api", "docs", "metrics")} == {"/api/v1", "/docs", "/metrics"}


def test_a_scrape_needs_a_credential_unless_metrics_are_public(tmp_path: Path) -> None:
    [refused] = get(app_of(tmp_path), "/metrics", credential=None)
    assert refused.status_code == 401 and "not authenticated" in refused.json()["detail"]
    [wrong] = get(app_of(tmp_path), "/metrics", credential="not-a-credential")
    assert wrong.status_code == 401
    [public] = get(app_of(tmp_path, AuthSettings(public_metrics=True)), "/metrics", credential=None)
    assert public.status_code == 200 and public.headers["content-type"].startswith("text/plain")
    with pytest.raises(SettingsError, match="public_metrics 'yes': true or false"):
        auth_from_dict({"public_metrics": "yes"})
    assert auth_from_dict({"public_metrics": True}).public_metrics


def test_a_scrape_counts_what_the_lists_show_and_times_requests_by_route(tmp_path: Path) -> None:
    jobs, nodes, _job, scrape = get(app_of(tmp_path), "/api/v1/jobs", "/api/v1/nodes", "/api/v1/jobs/3", "/metrics")
    found = samples(scrape.text)
    listed: dict[tuple[str, str, str], int] = {}
    for row in jobs.json():
        key = (row["state"], row["partition"], row["account"])
        listed[key] = listed.get(key, 0) + 1
    scraped = {(dict(labels)["state"], dict(labels)["partition"], dict(labels)["account"]): value
               for (name, labels), value in found.items() if name == "corral_jobs"}
    assert scraped == listed == {("RUNNING", "gpu", "a"): 1, ("RUNNING", "debug", "b"): 1,
                                 ("PENDING", "gpu", "a"): 1, ("PENDING", "gpu", "b"): 1}
    [n1] = nodes.json()
    assert found[("slurm_node_gpus_alloc", (("node", "n1"),))] == n1["gpus_alloc"] == 2
    assert found[("corral_gpus", (("model", "sim"), ("node", "n1"), ("state", "idle")))] == 6
    route = (("method", "GET"), ("route", "/api/v1/jobs/{job_id}"), ("status", "200"))
    assert found[("corral_http_request_duration_seconds_count", route)] == 1
    assert found[("corral_controller_leader", ())] == 1


def test_a_standby_answers_with_its_role_and_no_job_gauges(tmp_path: Path) -> None:
    async def scenario(a: Controller, b: Controller) -> None:
        await a.turn()
        await b.turn()
        assert (await a.client.post("/jobs", json=JOB)).status_code == 201
        leader, standby = (await a.client.get("http://a/metrics")), (await b.client.get("http://b/metrics"))
        assert leader.status_code == standby.status_code == 200
        assert samples(leader.text)[("corral_controller_leader", ())] == 1
        assert samples(leader.text)[("slurm_jobs_pending", ())] == 1
        found = samples(standby.text)
        assert found[("corral_controller_leader", ())] == 0
        assert not any(name.startswith(("corral_jobs", "slurm_jobs", "slurm_node")) for name, _ in found)

    run(f"sqlite:///{tmp_path / 'shared.db'}", scenario)
