"""The dashboard's routes over the app (no browser: tests/dashboard drives Chromium): its page for
browsers at /, the JSON index for other clients, its static files, and the API reads it adds."""
from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx

from corral.controller import credentials as cred
from tests.controller.conftest import SECRET, T0
from tests.controller.test_metrics_route import app_of

HTML = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"  # what Chromium asks for


def user(name: str, uid: int) -> str:
    return cred.issue_user(cred.signing_key(SECRET), name, uid, uid, T0 + 100, 600)


def requests(app, *calls: tuple[str, dict[str, str]]) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://controller") as client:
            return [await client.get(path, headers=headers) for path, headers in calls]

    return asyncio.run(run())


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def test_browsers_get_the_dashboard_at_the_root_and_other_clients_the_json_index(tmp_path: Path) -> None:
    page, index = requests(app_of(tmp_path), ("/", {"Accept": HTML}), ("/", {"Accept": "application/json"}))
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    assert index.json()["links"]["dashboard"] == "/" and index.json()["links"]["api"] == "/api/v1"
    assets = re.findall(r'(?:src|href)="(/dashboard/[^"]+)"', page.text)
    names = ("actions.js", "app.js", "charts.js", "job.js", "notebook.js", "pages.js", "style.css")
    assert sorted(assets) == [f"/dashboard/{name}" for name in names]
    served = requests(app_of(tmp_path), *((path, {}) for path in assets))
    assert [r.status_code for r in served] == [200] * len(assets)
    assert {r.headers["content-type"].split(";")[0] for r in served} == {"text/javascript", "text/css"}


def test_utilisation_now_and_a_jobs_telemetry_need_a_credential(tmp_path: Path) -> None:
    app = app_of(tmp_path)
    refused, history, telemetry, unknown = requests(
        app, ("/api/v1/utilisation", {}), ("/api/v1/utilisation", bearer(SECRET)),
        ("/api/v1/jobs/1/telemetry", bearer(SECRET)), ("/api/v1/jobs/99/telemetry", bearer(SECRET)))
    assert refused.status_code == 401
    # n1 has 8 GPUs; jobs 1 and 2 run on one each (tests/controller/conftest.py).
    assert history.json() == {"step_s": 10.0, "samples": [{"time": T0 + 100, "gpus_alloc": 2, "gpus_total": 8}],
                              "running_jobs": 2, "pending_jobs": 2}
    assert telemetry.json() == {"job_id": 1, "samples": []}  # no agent reported its usage
    assert unknown.status_code == 404


def test_a_jobs_output_is_its_owners(tmp_path: Path) -> None:
    # Job 1 is alice's (uid 0, account a); bob is neither its owner, a coordinator, nor an operator.
    other, own, bad = requests(app_of(tmp_path), ("/api/v1/jobs/1/output", bearer(user("bob", 1001))),
                               ("/api/v1/jobs/1/output", bearer(user("alice", 0))),
                               (f"/api/v1/jobs/1/output?tail_bytes={1 << 21}", bearer(user("alice", 0))))
    assert other.status_code == 403 and "job 1 belongs to alice" in other.json()["detail"]
    assert own.status_code == 404 and "slurm-1.out does not exist on the controller's host" in own.json()["detail"]
    assert bad.status_code == 422 and "tail_bytes" in bad.json()["detail"]
