"""The dashboard knows the services' gateway (issue 23): the controller names it ([gateway] url, which `corral
up` fills in with the gateway it starts) in /health, so the "Start a notebook" form asks for no URL, its link
and the list's Open go through that gateway, and a service's page shows its address. In a real Chromium
against a real cluster, JupyterLab and gateway; screenshots go to $CORRAL_DASHBOARD_SHOTS (default: the
test's temporary folder). The form without a configured gateway is test_dashboard_notebook.py's."""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dashboard.test_dashboard_actions import CHROMIUM, dashacts_users
from tests.e2e.harness import API, Cluster, free_port, wait_for
from tests.e2e.notebooks import gateway_for, needs_jupyter

playwright = pytest.importorskip("playwright.sync_api", reason="Playwright (pyproject's dev extra) is not installed")

JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"

pytestmark = [
    pytest.mark.slow, needs_jupyter,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                       reason="creates Unix users (useradd): needs root"),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's chromium at {CHROMIUM}"),
]


@pytest.fixture
def scene(tmp_path) -> Iterator[dict]:
    root = tmp_path / "cluster"
    root.mkdir()
    root.chmod(0o755)
    shots = Path(os.environ.get("CORRAL_DASHBOARD_SHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    port = free_port()
    # A trailing slash, as an operator may write it: the controller drops it.
    config = f'kill_grace_s = 2\nnode_timeout_s = 15\n[gateway]\nurl = "http://127.0.0.1:{port}/"\n'
    with dashacts_users("dashgw") as users:
        cluster = Cluster(root, nodes=1, gpus=1, config=config)
        try:
            cluster.start()
            token = cluster.http.post(f"{API}/tokens", json={"user": users["dashgw"]}).json()["token"]
            with gateway_for(cluster, tmp_path, port) as gateway:
                yield {"cluster": cluster, "user": users["dashgw"], "token": token, "gateway": gateway,
                       "shots": shots, "workdir": root}
        finally:
            if cluster.controller is not None and cluster.controller.poll() is None:
                for service in cluster.http.get(f"{API}/services").json():
                    cluster.http.delete(f"{API}/services/{service['name']}")
                wait_for(lambda: cluster.http.get(f"{API}/jobs").json() == [], timeout_s=30, message="jobs ended")
            cluster.stop()


def test_the_form_asks_for_no_gateway_and_its_links_use_the_configured_one(scene) -> None:
    gateway = scene["gateway"]
    assert scene["cluster"].http.get("/health").json()["gateway_url"] == gateway
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_context(base_url=scene["cluster"].url,
                                       viewport={"width": 1280, "height": 1000}).new_page()
            page.goto("/")
            page.wait_for_selector("form.login")
            page.fill("#token", scene["token"])
            page.click("form.login button")
            page.wait_for_selector(".stats")
            page.goto("/#/notebook")
            page.wait_for_selector("#notebook-form")

            assert page.locator("#nb-gateway").count() == 0, "the cluster names its gateway: no field for it"
            playwright.expect(page.locator("#nb-gateway-known")).to_have_text(
                f"Its link goes through the gateway at {gateway}.")
            page.fill("#nb-jupyter", JUPYTER)
            page.fill("#nb-workdir", str(scene["workdir"]))
            page.fill("#nb-time", "10:00")
            page.fill("#nb-name", "nb-dashgw")
            page.screenshot(path=str(scene["shots"] / "gateway-known-form.png"), full_page=True)
            page.click("#notebook-start")
            link = page.locator("#notebook-link")
            link.wait_for(timeout=90_000)
            assert link.get_attribute("href").startswith(f"{gateway}/s/nb-dashgw/lab?corral_token=")
            page.screenshot(path=str(scene["shots"] / "gateway-known-ready.png"), full_page=True)

            # The list's Open: a fresh credential, through the same gateway, with nothing typed.
            row = page.locator("tr[data-session='nb-dashgw']")
            row.wait_for()
            with page.expect_popup() as opened:
                row.locator("button[data-action='open']").click()
            lab = opened.value
            lab.wait_for_load_state()
            lab.wait_for_selector(".jp-LauncherCard", timeout=90_000)
            assert lab.url == f"{gateway}/s/nb-dashgw/lab"
            lab.close()

            # The service's page says where it answers.
            page.goto("/#/service/nb-dashgw")
            playwright.expect(page.locator("#service-address")).to_have_text(f"{gateway}/s/nb-dashgw/")
            # Its command is corral notebook's long wrapper: folded away, not a wall of shell.
            playwright.expect(page.locator("#service-command summary")).to_have_text(
                "JupyterLab, in corral notebook's wrapper")
            assert not page.locator("#service-command code").is_visible()
            page.screenshot(path=str(scene["shots"] / "gateway-known-service.png"), full_page=True)
        finally:
            browser.close()
