"""The dashboard's services pages in a real Chromium (Debian's, driven by Playwright): the list and one
service's page with its replicas (node, state, readiness, restarts, probe status, endpoint), its request
rate and history, and every value shown as text.

The page is the real one (the controller's static files and headers); the API behind it is a stand-in
serving ServiceOut bodies checked by the real model, because a controller runs services only once issue
22's engine part has landed (tests/dashboard/test_dashboard.py drives the other pages against a real
cluster)."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI, Header, HTTPException
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from corral.api.services import ServiceOut, ServiceSpec
from corral.controller.dashboard_routes import ASSETS_PATH, PAGE_HEADERS
from corral.dashboard import STATIC_DIR
from corral.protocol import API_PREFIX
from tests.cli.standin import ServerThread
from tests.cli.standin_services import service_out

playwright = pytest.importorskip("playwright.sync_api", reason="Playwright (pyproject's dev extra) is not installed")

CHROMIUM = "/usr/bin/chromium"
TOKEN = "ct1.1.svcedge-dashboard"
SCRIPT = "<img src=x onerror=alert(1)>"

pytestmark = [pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's chromium at {CHROMIUM}")]


def services() -> dict[str, dict]:
    web = ServiceSpec.model_validate({"name": "web", "user": "alice", "account": "physics",
                                      "command": ["python3", "-m", "http.server"], "workdir": "/srv",
                                      "replicas": 3, "ports": [{"name": "http"}]})
    replicas = [
        {"index": 0, "job_id": 21, "revision": 2, "node": "node1", "state": "RUNNING", "ready": True, "restarts": 0,
         "probes": [{"kind": "readiness", "ok": True, "consecutive": 9}], "endpoints": {"http": "10.0.0.1:31001"}},
        {"index": 1, "job_id": 22, "revision": 2, "node": "node2", "state": "RUNNING", "ready": False,
         "restarts": 3, "probes": [{"kind": "liveness", "ok": False, "consecutive": 3, "detail": "HTTP 500"}],
         "endpoints": {"http": "10.0.0.2:31002"}},
        {"index": 2, "job_id": 23, "revision": 2, "node": "", "state": "PENDING", "ready": False, "restarts": 0,
         "reason": "QuotaExceeded"},
    ]
    db = ServiceSpec.model_validate({"name": "vector-db", "user": "bob", "command": ["db"],
                                     "workdir": "/srv", "ports": [{"name": "grpc", "port": 7000}]})
    return {
        "web": service_out(web, 2, replicas, reason="QuotaExceeded",
                           load={"inflight": 4, "rps": 12.5, "at": 1_700_000_000.0},
                           history=["replica 1 restarted: liveness probe failed 3 times: HTTP 500", SCRIPT]),
        "vector-db": service_out(db),
    }


def standin_api() -> FastAPI:
    app = FastAPI()
    app.mount(ASSETS_PATH, StaticFiles(directory=STATIC_DIR), name="dashboard")
    known = services()

    def check(authorization: str | None) -> None:
        if authorization != f"Bearer {TOKEN}":
            raise HTTPException(401, "not authenticated: unknown token")

    @app.get("/")
    def root() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS)

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "cluster": "svcedge", "role": "leader"}

    @app.get(API_PREFIX + "/whoami")
    def whoami(authorization: str | None = Header(None)) -> dict:
        check(authorization)
        return {"name": "alice", "uid": 1000, "roles": [], "kind": "user"}

    @app.get(API_PREFIX + "/services")
    def list_services(authorization: str | None = Header(None)) -> list[ServiceOut]:
        check(authorization)
        return [ServiceOut.model_validate(known[name]) for name in sorted(known)]

    @app.get(API_PREFIX + "/services/{name}")
    def one(name: str, authorization: str | None = Header(None)) -> ServiceOut:
        check(authorization)
        if name not in known:
            raise HTTPException(404, f"unknown service {name!r}")
        return ServiceOut.model_validate(known[name])

    return app


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(standin_api()) as running:
        yield running


@pytest.fixture
def page(server, tmp_path):
    shots = Path(os.environ.get("CORRAL_DASHBOARD_SHOTS") or tmp_path)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("dialog", lambda dialog: errors.append(f"a dialog opened: {dialog.message}"))
        page.goto("/")
        page.wait_for_selector("form.login")
        page.fill("#token", TOKEN)
        page.click("form.login button")
        page.wait_for_selector("#whoami:has-text('alice')")
        page.shots = shots
        yield page
        context.close()
        browser.close()
    assert [e for e in errors if not e.startswith("Failed to load resource")] == []


def test_the_services_list(page) -> None:
    page.click("#nav a[data-page=services]")
    page.wait_for_selector("tr[data-service=web]")
    page.screenshot(path=str(page.shots / "services.png"), full_page=True)
    web = page.locator("tr[data-service=web] td").all_inner_texts()
    assert web == ["web", "alice", "physics", "1 / 3", "2", "http:any", "12.5 req/s, 4 in flight", "QuotaExceeded"]
    db = page.locator("tr[data-service=vector-db] td").all_inner_texts()
    assert db[:7] == ["vector-db", "bob", "—", "0 / 1", "1", "grpc:7000", "—"]
    assert page.get_attribute("#nav a[data-page=services]", "class") == "active"


def test_a_services_page_shows_each_replica(page) -> None:
    page.goto("/#/services")
    page.click("tr[data-service=web] a")
    page.wait_for_selector("tr[data-replica='1']")
    page.screenshot(path=str(page.shots / "service-web.png"), full_page=True)
    first = page.locator("tr[data-replica='0'] td").all_inner_texts()
    assert first[:7] == ["0", "21", "2", "node1", "RUNNING", "ready", "0"]
    assert first[7] == "readiness ok" and first[8] == "http 10.0.0.1:31001"
    second = page.locator("tr[data-replica='1'] td").all_inner_texts()
    assert second[4:8] == ["RUNNING", "not ready", "3", "liveness failed ×3 (HTTP 500)"]
    third = page.locator("tr[data-replica='2'] td").all_inner_texts()
    assert (third[3], third[4], third[9]) == ("—", "PENDING", "QuotaExceeded")
    assert page.inner_text("#service-rate") == "12.5 req/s, 4 in flight"
    assert page.get_attribute("tr[data-replica='0'] a", "href") == "#/job/21"
    history = page.locator("ul.history li").all_inner_texts()
    assert history == ["replica 1 restarted: liveness probe failed 3 times: HTTP 500", SCRIPT]  # text, not markup
    assert page.locator("ul.history img").count() == 0
    assert page.get_attribute("#nav a[data-page=services]", "class") == "active"


def test_an_unknown_service_says_so(page) -> None:
    page.goto("/#/service/nosuch")
    page.wait_for_selector("div.error")
    assert "unknown service 'nosuch'" in page.inner_text("div.error")
