"""The dashboard starts a notebook (issue 23, item 5), in a real Chromium against a real cluster, a real
JupyterLab and the real gateway, as two Unix users made for the test: bad options get the API's reason on
the page and nothing is started; the owner starts one with the form and opens the link it shows; another
user's dashboard can neither open it (the gateway refuses them) nor stop or cancel it (the API refuses them);
the owner stops it. Screenshots go to $CORRAL_DASHBOARD_SHOTS (default: the test's temporary folder)."""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dashboard.test_dashboard_actions import CHROMIUM, dashacts_users
from tests.e2e.harness import API, Cluster, wait_for
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
    with dashacts_users("nbowner", "nbother") as users:
        cluster = Cluster(root, nodes=1, gpus=1)
        try:
            cluster.start()
            tokens = {role: cluster.http.post(f"{API}/tokens", json={"user": name}).json()["token"]
                      for role, name in users.items()}
            with gateway_for(cluster, tmp_path) as gateway:
                yield {"cluster": cluster, "users": users, "tokens": tokens, "gateway": gateway, "shots": shots,
                       "workdir": root}
        finally:
            # A failed test leaves its notebook running: its JupyterLab would outlive the cluster's agent.
            if cluster.controller is not None and cluster.controller.poll() is None:
                for name in services({"cluster": cluster}):
                    cluster.http.delete(f"{API}/services/{name}")
                wait_for(lambda: cluster.http.get(f"{API}/jobs").json() == [], timeout_s=30, message="jobs ended")
            cluster.stop()


@pytest.fixture
def browser() -> Iterator[object]:
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def signed_in(browser, scene: dict, who: str):
    context = browser.new_context(base_url=scene["cluster"].url, viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.goto("/")
    page.wait_for_selector("form.login")
    page.fill("#token", scene["tokens"][who])
    page.click("form.login button")
    page.wait_for_selector(".stats")
    page.goto("/#/notebook")
    page.wait_for_selector("#notebook-form")
    return page


def fill(page, scene: dict, **values: str) -> None:
    defaults = {"jupyter": JUPYTER, "workdir": str(scene["workdir"]), "gateway": scene["gateway"]}
    for name, value in {**defaults, **values}.items():
        page.fill(f"#nb-{name}", value)


def services(scene: dict) -> list[str]:
    return [s["name"] for s in scene["cluster"].http.get(f"{API}/services").json()]


def test_the_owner_starts_and_opens_a_notebook_another_user_cannot_open_or_stop_it(scene, browser) -> None:
    owner, other = scene["users"]["nbowner"], scene["users"]["nbother"]
    page = signed_in(browser, scene, "nbowner")

    # Bad input: the API's reason, naming the field, and nothing started.
    fill(page, scene, time="4h")
    page.click("#notebook-start")
    error = page.locator("#notebook-error")
    playwright.expect(error).to_contain_text("Start the notebook refused (422): time: invalid time limit '4h': "
                                             "expected M, M:S, H:M:S, D-H, D-H:M or D-H:M:S. Nothing was started.")
    page.screenshot(path=str(scene["shots"] / "notebook-refused.png"), full_page=True)
    assert services(scene) == []

    # A Jupyter the node does not have: the session ends before it is ready, and the page says why (its log's
    # line), with nothing left behind.
    fill(page, scene, time="5:00", jupyter="jupyter-missing-notebook2", name="nb-missing-notebook2")
    page.click("#notebook-start")
    playwright.expect(error).to_contain_text("Notebook nb-missing-notebook2 ended before it was ready (job",
                                             timeout=60_000)
    assert "corral notebook: jupyter-missing-notebook2 is not found on " in error.inner_text()
    assert "the dashboard's Jupyter field" in error.inner_text()
    assert "Its link's credential was revoked." in error.inner_text()
    assert services(scene) == []
    tokens = scene["cluster"].http.get(f"{API}/tokens", params={"all": True}).json()
    assert all(t["revoked"] for t in tokens if t["description"] == "notebook nb-missing-notebook2"), tokens

    fill(page, scene, time="20:00", idle_timeout="10:00", name="nb-dash-notebook2")
    page.click("#notebook-start")
    link = page.locator("#notebook-link")
    link.wait_for(timeout=90_000)
    assert "Notebook nb-dash-notebook2 is ready: job" in page.inner_text("#notebook-status")
    page.screenshot(path=str(scene["shots"] / "notebook-ready.png"), full_page=True)
    href = link.get_attribute("href")
    assert href.startswith(f"{scene['gateway']}/s/nb-dash-notebook2/lab?corral_token=")
    spec = scene["cluster"].http.get(f"{API}/services/nb-dash-notebook2").json()["spec"]
    assert (spec["user"], spec["session"], spec["gpus_per_node"], spec["time_limit_s"], spec["idle_timeout_s"]) == (
        owner, True, 1, 1200, 600)

    with page.expect_popup() as opened:
        link.click()
    lab = opened.value
    refusals: list[str] = []  # JupyterLab's own calls through the gateway, each with the cookie alone
    lab.on("response", lambda r: refusals.append(f"{r.status} {r.url}") if r.status in (401, 403) else None)
    lab.wait_for_load_state()
    lab.wait_for_selector(".jp-LauncherCard", timeout=90_000)  # JupyterLab's own page, its launcher drawn
    assert lab.url == f"{scene['gateway']}/s/nb-dash-notebook2/lab"  # the credential left the URL for a cookie
    assert refusals == []
    lab.screenshot(path=str(scene["shots"] / "notebook-jupyterlab.png"))
    lab.close()

    # Another user sees it listed, and is refused: the gateway will not open it, the API will not stop it,
    # nor cancel its job.
    intruder = signed_in(browser, scene, "nbother")
    row = intruder.locator("tr[data-session='nb-dash-notebook2']")
    row.wait_for()
    assert owner in row.inner_text()
    row.locator("button[data-action='open']").click()  # the gateway's URL not given yet: said, nothing opened
    playwright.expect(row.locator(".error")).to_have_text("Give the gateway's URL in the form above first.")
    intruder.fill("#nb-gateway", scene["gateway"])
    with intruder.expect_popup() as opened:
        row.locator("button[data-action='open']").click()
    refused = opened.value
    refused.wait_for_load_state()
    assert f"only {owner} may open it, not {other}" in refused.inner_text("body"), refused.inner_text("body")
    refused.close()
    intruder.once("dialog", lambda dialog: dialog.accept())
    row.locator("button[data-action='stop']").click()
    playwright.expect(intruder.locator("#session-error")).to_contain_text(
        "Stop notebook nb-dash-notebook2 refused (403)")
    intruder.screenshot(path=str(scene["shots"] / "notebook-other-refused.png"), full_page=True)
    job_id = scene["cluster"].http.get(f"{API}/services/nb-dash-notebook2").json()["replicas"][0]["job_id"]
    intruder.goto(f"/#/job/{job_id}")
    intruder.wait_for_selector(".job-title")
    intruder.once("dialog", lambda dialog: dialog.accept())
    intruder.click("#job-actions button[data-action='cancel']")
    playwright.expect(intruder.locator("#action-error")).to_contain_text(f"Cancel job {job_id} refused (403)")
    assert scene["cluster"].job(job_id)["state"] == "RUNNING" and "nb-dash-notebook2" in services(scene)

    # Its owner stops it from the list.
    page.goto("/#/notebook")
    mine = page.locator("tr[data-session='nb-dash-notebook2']")
    mine.wait_for()
    page.once("dialog", lambda dialog: dialog.accept())
    mine.locator("button[data-action='stop']").click()
    wait_for(lambda: "nb-dash-notebook2" not in services(scene), 30, message="the notebook stopped")
    scene["cluster"].wait_state(job_id, "CANCELLED", "COMPLETED", timeout_s=30)
