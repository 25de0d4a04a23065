"""The dashboard acts (issue 23, item 5), in a real Chromium against a real cluster, as Unix users made for
the test: a job's owner cancels, holds, releases and requeues it and sees its state change; another user
gets the API's refusal on the page and the job is unchanged; an operator drains and resumes a node; a
running job's output grows on its page without a reload; the overview says who holds each GPU.
Screenshots go to $CORRAL_DASHBOARD_SHOTS (default: the test's temporary folder)."""
from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.harness import API, Cluster, wait_for

playwright = pytest.importorskip("playwright.sync_api", reason="Playwright (pyproject's dev extra) is not installed")

CHROMIUM = "/usr/bin/chromium"
TICKER = 'i=0; while true; do i=$((i+1)); echo "tick $i"; sleep 1; done'

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                       reason="creates Unix users (useradd): needs root"),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's chromium at {CHROMIUM}"),
]


@contextlib.contextmanager
def dashacts_users(*roles: str) -> Iterator[dict[str, str]]:
    """Fresh Unix users named dashacts<role><tag> (unique: tests run side by side), removed afterwards."""
    tag = secrets.token_hex(3)
    made: dict[str, str] = {}
    try:
        for role in roles:
            name = f"dashacts{role}{tag}"
            subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name], check=True)
            made[role] = pwd.getpwnam(name).pw_name
        yield made
    finally:
        for name in made.values():
            subprocess.run(["userdel", name], check=False)


@dataclass
class Scene:
    cluster: Cluster
    users: dict[str, str]  # role (owner, other, operator) -> Unix name
    tokens: dict[str, str]
    shots: Path

    def submit(self, **fields) -> int:
        body = {"workdir": str(self.cluster.root), "user": self.users["owner"], "env": {"PATH": os.environ["PATH"]},
                **fields}
        reply = self.cluster.http.post(f"{API}/jobs", json=body,
                                       headers={"Authorization": f"Bearer {self.tokens['owner']}"})
        assert reply.status_code == 201, reply.text
        return reply.json()["job_id"]

    def job(self, job_id: int) -> dict:
        return self.cluster.job(job_id)


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Iterator[Scene]:
    root = tmp_path_factory.mktemp("cluster")
    root.chmod(0o755)
    shots = Path(os.environ.get("CORRAL_DASHBOARD_SHOTS") or tmp_path_factory.mktemp("shots"))
    shots.mkdir(parents=True, exist_ok=True)
    with dashacts_users("owner", "other", "oper") as users:
        cluster = Cluster(root, nodes=2, gpus=2, config=(
            f'kill_grace_s = 2\nnode_timeout_s = 15\n[auth]\noperators = ["{users["oper"]}"]\n'))
        try:
            cluster.start()
            tokens = {role: cluster.http.post(f"{API}/tokens", json={"user": name}).json()["token"]
                      for role, name in users.items()}
            yield Scene(cluster, {"owner": users["owner"], "other": users["other"], "operator": users["oper"]},
                        {"owner": tokens["owner"], "other": tokens["other"], "operator": tokens["oper"]}, shots)
        finally:
            if cluster.controller is not None and cluster.controller.poll() is None:
                for job in cluster.http.get(f"{API}/jobs").json():
                    cluster.http.post(f"{API}/jobs/{job['id']}/cancel")
                wait_for(lambda: cluster.http.get(f"{API}/jobs").json() == [], timeout_s=30, message="jobs ended")
            cluster.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, scene):
    context = browser.new_context(base_url=scene.cluster.url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    yield page
    context.close()
    # A refused action is logged by the browser as a failed resource (403); no script error may happen.
    assert [e for e in errors if not e.startswith("Failed to load resource")] == []


def sign_in(page, scene: Scene, who: str) -> None:
    page.goto("/")
    page.wait_for_selector("form.login")
    page.fill("#token", scene.tokens[who])
    page.click("form.login button")
    page.wait_for_selector(".stats")
    assert page.inner_text("#whoami").startswith(scene.users[who])


def open_job(page, job_id: int) -> None:
    page.goto(f"/#/job/{job_id}")
    page.wait_for_selector(".job-title")


def buttons(page) -> list[str]:
    return page.locator("#job-actions button").all_inner_texts()


def click(page, action: str, *, confirm: bool | None = None) -> list[str]:
    """Click a job's action button, answering its confirmation (None: it asks none; an unexpected dialog is
    dismissed by Playwright); returns the questions asked."""
    asked: list[str] = []

    def answer(dialog) -> None:
        asked.append(dialog.message)
        dialog.accept() if confirm else dialog.dismiss()

    if confirm is not None:
        page.once("dialog", answer)
    page.click(f"#job-actions button[data-action='{action}']")
    return asked


def test_the_owner_holds_releases_and_cancels_a_pending_job(page, scene: Scene) -> None:
    running = scene.submit(name="first", gpus=1, argv=["sleep", "600"])
    waiting = scene.submit(name="second", gpus=1, argv=["true"], dependency=f"afterok:{running}")
    scene.cluster.wait_state(running, "RUNNING")
    sign_in(page, scene, "owner")
    open_job(page, waiting)
    assert buttons(page) == ["Cancel", "Hold"]  # pending, not held: no Release, no Requeue

    click(page, "hold")
    playwright.expect(page.locator("#action-message")).to_have_text(f"Held job {waiting}: it is PENDING (held).")
    assert scene.job(waiting)["held"] is True
    assert buttons(page) == ["Cancel", "Release"] and "yes" in page.locator("dl.facts >> nth=0").inner_text()
    page.screenshot(path=str(scene.shots / "actions-owner-held.png"), full_page=True)

    click(page, "release")
    playwright.expect(page.locator("#action-message")).to_have_text(f"Released job {waiting}: it is PENDING.")
    assert scene.job(waiting)["held"] is False

    asked = click(page, "cancel", confirm=False)  # asked, and said no: nothing is sent
    assert asked == [f"Cancel job {waiting} (second)? It leaves the queue."]
    assert scene.job(waiting)["state"] == "PENDING" and "Released" in page.inner_text("#action-message")
    click(page, "cancel", confirm=True)
    playwright.expect(page.locator("#action-message")).to_have_text(f"Cancelled job {waiting}: it is CANCELLED.")
    assert scene.job(waiting)["state"] == "CANCELLED"
    assert "CANCELLED" in page.inner_text(".job-title") and buttons(page) == []  # ended: nothing to offer
    scene.cluster.http.post(f"{API}/jobs/{running}/cancel")


def test_another_user_is_refused_with_the_apis_reason_and_nothing_changes(page, scene: Scene) -> None:
    running = scene.submit(name="mine", gpus=1, argv=["sleep", "600"])
    waiting = scene.submit(name="mine-next", gpus=1, argv=["true"], dependency=f"afterok:{running}")
    scene.cluster.wait_state(running, "RUNNING")
    owner, other = scene.users["owner"], scene.users["other"]
    sign_in(page, scene, "other")

    open_job(page, running)
    assert buttons(page) == ["Cancel", "Requeue"]  # offered by state: the API decides who may
    click(page, "cancel", confirm=True)
    error = page.locator("#action-error")
    playwright.expect(error).to_contain_text(f"Cancel job {running} refused (403): Access/permission denied")
    assert f"{other} is neither its owner" in error.inner_text() and "Nothing was changed." in error.inner_text()
    page.screenshot(path=str(scene.shots / "actions-other-refused.png"), full_page=True)
    assert scene.job(running)["state"] == "RUNNING" and scene.job(running)["user"] == owner
    assert not page.locator("#job-actions button[data-action='cancel']").is_disabled()  # may try again

    click(page, "requeue", confirm=True)
    playwright.expect(error).to_contain_text(f"Requeue job {running} refused (403)")
    assert scene.job(running)["state"] == "RUNNING" and scene.job(running)["restart_count"] == 0

    open_job(page, waiting)
    click(page, "hold")
    playwright.expect(page.locator("#action-error")).to_contain_text(f"Hold job {waiting} refused (403)")
    assert scene.job(waiting)["held"] is False and scene.job(waiting)["state"] == "PENDING"
    for job_id in (waiting, running):
        scene.cluster.http.post(f"{API}/jobs/{job_id}/cancel")


def test_the_owner_requeues_a_running_job_and_it_starts_again(page, scene: Scene) -> None:
    running = scene.submit(name="again", gpus=1, argv=["sleep", "600"])
    scene.cluster.wait_state(running, "RUNNING")
    sign_in(page, scene, "owner")
    open_job(page, running)
    asked = click(page, "requeue", confirm=True)
    assert asked == [f"Requeue job {running} (again)? Its processes are killed and it waits in the queue again."]
    playwright.expect(page.locator("#action-message")).to_contain_text(f"Requeued job {running}: it is")
    wait_for(lambda: scene.job(running)["restart_count"] == 1 and scene.job(running)["state"] == "RUNNING",
             timeout_s=30, message="the requeued job running again")
    assert any(entry["event"] == "requeue-requested" for entry in scene.job(running)["history"])
    open_job(page, running)
    assert "requeue" in page.locator("section", has_text="History").inner_text()
    scene.cluster.http.post(f"{API}/jobs/{running}/cancel")
    kept = scene.submit(name="no-requeue", gpus=1, argv=["sleep", "600"], requeue=False)
    scene.cluster.wait_state(kept, "RUNNING")
    open_job(page, kept)
    assert buttons(page) == ["Cancel"]  # submitted with --no-requeue: no Requeue to offer
    scene.cluster.http.post(f"{API}/jobs/{kept}/cancel")


def test_a_running_jobs_output_grows_on_its_page(page, scene: Scene) -> None:
    ticking = scene.submit(name="ticker", gpus=1, argv=["sh", "-c", TICKER])
    scene.cluster.wait_state(ticking, "RUNNING")
    wait_for(lambda: "tick 2" in scene.cluster.http.get(f"{API}/jobs/{ticking}/output").json().get("text", ""),
             message="the job's first lines")
    sign_in(page, scene, "owner")
    open_job(page, ticking)
    shown = page.query_selector("#output")  # this element: a re-rendered page would put a new one
    first = max(int(n) for n in re.findall(r"tick (\d+)", shown.inner_text()))
    assert "Following live" in page.inner_text("#output-live")
    wait_for(lambda: f"tick {first + 3}\n" in shown.inner_text(), timeout_s=12, message="three more lines appended")
    text = shown.inner_text()
    ticks = [int(n) for n in re.findall(r"tick (\d+)", text)]
    assert ticks == list(range(ticks[0], ticks[-1] + 1))  # appended in order, nothing twice, nothing lost
    page.screenshot(path=str(scene.shots / "actions-job-following.png"), full_page=True)
    scene.cluster.http.post(f"{API}/jobs/{ticking}/cancel")


def test_the_overview_says_who_holds_each_gpu(page, scene: Scene) -> None:
    held = scene.submit(name="holder", gpus=2, argv=["sleep", "600"])
    scene.cluster.wait_state(held, "RUNNING")
    owner = scene.users["owner"]
    sign_in(page, scene, "other")  # anyone sees who holds what, as squeue shows every job
    page.wait_for_selector(".holders")
    cells = page.locator(f".heatmap rect[data-job='{held}']")
    assert cells.count() == 2
    assert f"job {held} of {owner}" in cells.first.locator("title").text_content()
    row = page.locator(f".holders tr[data-holder='{held}']").all_inner_texts()[0].split("\t")
    node = scene.job(held)["nodelist"]
    assert row == [str(held), owner, "holder", scene.job(held)["account"], f"{node}: 0,1"]
    page.screenshot(path=str(scene.shots / "actions-overview.png"), full_page=True)
    scene.cluster.http.post(f"{API}/jobs/{held}/cancel")


def test_an_operator_drains_and_resumes_a_node_and_others_get_no_controls(page, scene: Scene) -> None:
    # The tests before this one cancel their jobs without waiting for them to end: node2 is idle once they have.
    deadline = time.monotonic() + 30
    while next(n for n in scene.cluster.nodes() if n["name"] == "node2")["state"] != "idle":
        assert time.monotonic() < deadline, "node2 never went idle: an earlier test's job still holds it"
        time.sleep(0.2)
    sign_in(page, scene, "owner")
    page.goto("/#/nodes")
    page.wait_for_selector("tr[data-node='node2']")
    assert page.locator("tr[data-node] form, tr[data-node] button").count() == 0  # not an operator

    page.click("#logout")
    sign_in(page, scene, "operator")
    page.goto("/#/nodes")
    row = page.locator("tr[data-node='node2']")
    row.wait_for()
    row.locator("input[name=reason]").fill("   ")  # no reason: the form does not send it
    row.locator("button[data-action='drain']").click()
    assert row.locator("input[name=reason]:invalid").count() == 1
    assert next(n for n in scene.cluster.nodes() if n["name"] == "node2")["state"] == "idle"
    row.locator("input[name=reason]").fill("swap the fan")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    row.locator("button[data-action='drain']").click()
    playwright.expect(page.locator("#action-message")).to_contain_text("Drained node2: it is drain")
    assert asked == ["Drain node2? No new job starts there; its running jobs go on."]
    node = next(n for n in scene.cluster.nodes() if n["name"] == "node2")
    assert node["state"] in ("drained", "draining") and node["drain_reason"] == "swap the fan"
    assert "swap the fan" in row.inner_text()
    page.screenshot(path=str(scene.shots / "actions-operator-drained.png"), full_page=True)

    row.locator("button[data-action='resume']").click()
    playwright.expect(page.locator("#action-message")).to_contain_text("Resumed node2: it is idle")
    assert next(n for n in scene.cluster.nodes() if n["name"] == "node2")["state"] == "idle"
