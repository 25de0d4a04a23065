"""The web dashboard in a real Chromium (Debian's, driven by Playwright) against a real cluster (controller
and agents as subprocesses, tests/e2e/harness.py), signed in as two Unix users with their own API tokens:
every page as each of them, and what a browser without a token gets. Screenshots of every page go to
$CORRAL_DASHBOARD_SHOTS (default: the test's temporary folder) for a person to look at."""
from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.controller import credentials as cred
from tests.controller.test_identity import UnixUser, unix_users
from tests.e2e.harness import API, Cluster, wait_for

playwright = pytest.importorskip("playwright.sync_api", reason="Playwright (pyproject's dev extra) is not installed")

CHROMIUM = "/usr/bin/chromium"
NODES, GPUS = 3, 4
H100 = "NVIDIA H100 80GB HBM3"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                       reason="creates Unix users (useradd): needs root"),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's chromium at {CHROMIUM}"),
]


@dataclass
class Scene:
    cluster: Cluster
    users: dict[str, UnixUser]
    tokens: dict[str, str]
    jobs: dict[str, int]  # what each job is -> its id
    shots: Path


def tenancy(alice: str, bob: str) -> dict:
    return {"accounts": [{"name": "physics", "shares": 3}, {"name": "biology", "shares": 1}],
            "users": [{"name": alice, "accounts": ["physics"]}, {"name": bob, "accounts": ["biology"]}],
            "queues": [{"name": "physics-q", "cohort": "lab", "accounts": ["physics"], "nominal": {"gpu": 5}},
                       {"name": "biology-q", "cohort": "lab", "accounts": ["biology"], "nominal": {"gpu": 3}}]}


def submit(cluster: Cluster, token: str, user: str, **fields) -> int:
    body = {"workdir": str(cluster.root), "user": user, "env": {"PATH": os.environ["PATH"]}, "acctg_freq_s": 1,
            **fields}
    reply = cluster.http.post(f"{API}/jobs", json=body, headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 201, reply.text
    return reply.json()["job_id"]


def end_jobs(cluster: Cluster) -> None:
    """Cancel what still runs and wait until it has ended: a stopped agent leaves its tasks running."""
    for job in cluster.http.get(f"{API}/jobs").json():
        cluster.http.post(f"{API}/jobs/{job['id']}/cancel")
    wait_for(lambda: cluster.http.get(f"{API}/jobs").json() == [], timeout_s=30, message="every job ended")


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Iterator[Scene]:
    root = tmp_path_factory.mktemp("cluster")
    root.chmod(0o755)
    shots = Path(os.environ.get("CORRAL_DASHBOARD_SHOTS") or tmp_path_factory.mktemp("shots"))
    shots.mkdir(parents=True, exist_ok=True)
    # The nodes' GPUs are read through NVML (the test's stand-in), busy as given here: the heatmap and the
    # jobs' telemetry show their utilisation.
    saved = os.environ.get("FAKE_NVML_UTIL")
    # GPUs 2 and 3 of every node are idle: a job on those alone is flagged after gpu_idle_flag_s.
    os.environ["FAKE_NVML_UTIL"] = "85,85,0,0"
    cluster = Cluster(root, nodes=NODES, gpus=GPUS, config="gpu_idle_flag_s = 2\n",
                      nvml_names={f"node{i}": [H100] * GPUS for i in range(1, NODES + 1)})
    try:
        with unix_users("alice", "bob") as users:
            cluster.start()
            alice, bob = users["alice"].name, users["bob"].name
            assert cluster.http.put(f"{API}/tenancy", json=tenancy(alice, bob)).status_code == 200
            # node3 is drained before any job comes: the jobs run on node1 and node2.
            drained = cluster.http.post(f"{API}/nodes/node3", json={"drain": True, "reason": "fan failure"})
            assert drained.status_code == 200, drained.text
            tokens = {role: cluster.http.post(f"{API}/tokens", json={"user": user.name}).json()["token"]
                      for role, user in users.items()}
            jobs = {
                "alice-running": submit(cluster, tokens["alice"], alice, name="train-resnet", gpus=2,
                                        argv=["sh", "-c", "echo hello from alice; echo epoch 1 loss 0.42; sleep 600"]),
                "bob-running": submit(cluster, tokens["bob"], bob, name="fold-proteins", gpus=3,
                                      argv=["sh", "-c", "echo bob was here; sleep 600"]),
                # Past biology's quota of 3: borrowed from physics (the same cohort), which uses 2 of its 5.
                "bob-borrowing": submit(cluster, tokens["bob"], bob, name="fold-more", gpus=2, argv=["sleep", "600"]),
                "bob-done": submit(cluster, tokens["bob"], bob, name="quick", gpus=0, batch=True,
                                   script="#!/bin/sh\necho done\n"),
            }
            for key in ("alice-running", "bob-running", "bob-borrowing"):
                cluster.wait_state(jobs[key], "RUNNING")
            cluster.wait_state(jobs["bob-done"], "COMPLETED")
            # Past physics' quota, with nothing left to borrow (and one GPU free): it waits.
            jobs["alice-pending"] = submit(cluster, tokens["alice"], alice, name="big-sweep", gpus=4, argv=["true"])
            now = time.time()
            assert cluster.http.post(f"{API}/reservations", json={
                "name": "maint-node2", "start": now + 7200, "end": now + 10800, "nodes": "node2",
                "maintenance": True}).status_code == 201
            wait_for(lambda: cluster.job(jobs["alice-pending"])["reason"] not in ("", "None"), message="a reason")
            wait_for(lambda: len(cluster.http.get(f"{API}/jobs/{jobs['alice-running']}/telemetry")
                                 .json()["samples"]) >= 3, message="three usage samples of alice's job")
            wait_for(lambda: any(job["gpu_idle_flagged"] for job in cluster.http.get(f"{API}/jobs").json()),
                     message="a job on idle GPUs flagged")
            yield Scene(cluster, users, tokens, jobs, shots)
    finally:
        if cluster.controller is not None and cluster.controller.poll() is None:
            end_jobs(cluster)
        cluster.stop()
        if saved is None:
            os.environ.pop("FAKE_NVML_UTIL", None)
        else:
            os.environ["FAKE_NVML_UTIL"] = saved


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
    # The browser logs every refused API call (another user's output: 403) the page shows as such; no
    # script error may happen.
    assert [e for e in errors if not e.startswith("Failed to load resource")] == []


def sign_in(page, token: str) -> None:
    page.goto("/")
    page.wait_for_selector("form.login")
    page.fill("#token", token)
    page.click("form.login button")
    page.wait_for_selector(".stats")


def visit(page, scene: Scene, hash_: str, ready: str, shot: str) -> None:
    page.goto(f"/#/{hash_}")
    page.wait_for_selector(ready)
    page.screenshot(path=str(scene.shots / f"{shot}.png"), full_page=True)


def test_a_browser_without_a_token_lands_on_the_login_page(browser, scene) -> None:
    context = browser.new_context(base_url=scene.cluster.url)
    page = context.new_page()
    page.goto("/#/jobs")
    page.wait_for_selector("form.login")
    assert "Paste an API token" in page.inner_text("#login-message")
    page.screenshot(path=str(scene.shots / "login.png"), full_page=True)
    # A token the API refuses (401): back on the login page, with the API's reason.
    page.fill("#token", "ct1.999.not-a-real-secret")
    page.click("form.login button")
    page.locator("#login-message", has_text="refused").wait_for()  # (the page's CSP allows no eval)
    assert "token 999 is unknown" in page.inner_text("#login-message")
    page.screenshot(path=str(scene.shots / "login-refused.png"), full_page=True)
    # A valid credential that is not a user's (a node's agent): refused (403) and not kept.
    page.fill("#token", cred.issue_agent(cred.signing_key(scene.cluster.secret), "node1"))
    page.click("form.login button")
    page.locator("#login-message", has_text="agent credential").wait_for()
    assert "(403): Access/permission denied" in page.inner_text("#login-message")
    page.goto("/#/nodes")
    page.wait_for_selector("form.login")
    assert "Paste an API token" in page.inner_text("#login-message")
    context.close()


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_every_page_as_each_user(page, scene: Scene, who: str) -> None:
    other = "bob" if who == "alice" else "alice"
    me, them = scene.users[who].name, scene.users[other].name
    sign_in(page, scene.tokens[who])
    assert page.inner_text("#whoami") == me

    visit(page, scene, "overview", ".heatmap", f"{who}-overview")
    assert page.locator(".heatmap rect[data-gpu]").count() == NODES * GPUS
    held = {scene.jobs["alice-running"]: 2, scene.jobs["bob-running"]: 3, scene.jobs["bob-borrowing"]: 2}
    for job_id, gpus in held.items():
        assert page.locator(f".heatmap rect[data-job='{job_id}']").count() == gpus
    assert page.locator(".heatmap rect[data-gpu^='node3'][fill='#f0ad4e']").count() == GPUS  # drained
    assert "7 / 12" in page.inner_text(".stats")  # GPUs allocated
    assert page.inner_text(".stats a[href='#/jobs?states=RUNNING']") == "3"
    assert page.inner_text(".stats a[href='#/jobs?states=PENDING']") == "1"
    assert page.locator(".line-chart path.series").count() >= 1

    visit(page, scene, "jobs", "table.grid", f"{who}-jobs")
    row = page.locator(f"tr[data-job='{scene.jobs['alice-running']}']")
    assert "RUNNING" in row.inner_text() and "train-resnet" in row.inner_text()
    pending = scene.cluster.job(scene.jobs["alice-pending"])
    assert pending["reason"] in page.locator(f"tr[data-job='{pending['id']}']").inner_text()
    assert page.locator(f"tr[data-job='{scene.jobs['bob-done']}']").count() == 0  # finished: not by default
    flagged = {job["id"] for job in scene.cluster.http.get(f"{API}/jobs").json() if job["gpu_idle_flagged"]}
    assert flagged  # the scene waited for one
    badged = {int(row.get_attribute("data-job")) for row in page.locator("tr[data-job]").all()
              if row.locator(".s-gpuidle").count()}
    assert badged == flagged

    page.fill("form.filters input[name=user]", them)  # the form, as a person uses it
    page.select_option("form.filters select[name=ended]", "1d")
    page.click("form.filters button")
    playwright.expect(page).to_have_url(f"{scene.cluster.url}/#/jobs?user={them}&ended=1d")
    playwright.expect(page.locator("table.grid tbody tr")).to_have_count(3 if who == "alice" else 2)
    page.screenshot(path=str(scene.shots / f"{who}-jobs-filtered.png"), full_page=True)
    users = set(page.locator("table.grid tbody tr td:nth-child(3)").all_inner_texts())
    assert users == {them}
    visit(page, scene, "jobs?states=COMPLETED&ended=all", "table.grid", f"{who}-jobs-completed")
    assert page.locator("table.grid tbody tr").count() == 1
    visit(page, scene, "jobs?user=nobody-here", ".empty", f"{who}-jobs-empty")
    assert page.inner_text(".empty") == "no jobs match these filters"

    own = scene.jobs[f"{who}-running"]
    visit(page, scene, f"job/{own}", "#output", f"{who}-job-own")
    assert "RUNNING" in page.inner_text(".job-title")
    assert ("hello from alice" if who == "alice" else "bob was here") in page.inner_text("#output")
    if who == "alice":  # sampled through NVML: 2 GPUs, busy as FAKE_NVML_UTIL says
        usage = scene.cluster.job(own)["usage"]
        assert usage["gpus"] == 2
        assert f"{usage['ave_gpu_util_pct']:g}%" in page.inner_text("dl.facts >> nth=2")
        assert page.locator(".telemetry path.series").count() >= 2

    theirs = scene.jobs[f"{other}-running"]
    visit(page, scene, f"job/{theirs}", "#output-unavailable", f"{who}-job-other")
    assert "RUNNING" in page.inner_text(".job-title")  # as squeue shows every job
    assert f"belongs to {them}" in page.inner_text("#output-unavailable")  # its output is its owner's

    # Waiting on quota: the core has no estimate, the forecast has one, with its window beside it.
    wait_for(lambda: scene.cluster.job(pending["id"]).get("estimated_start_window"), message="a start window")
    visit(page, scene, f"job/{pending['id']}", ".job-title", f"{who}-job-pending")
    assert "PENDING" in page.inner_text(".job-title")
    assert "forecast with predicted runtimes, between " in page.inner_text("main")
    assert pending["reason"] in page.inner_text("main") and pending["reason_detail"] in page.inner_text("main")
    assert "no output yet" in page.inner_text("main") if who == "alice" else "belongs to" in page.inner_text("main")

    done = scene.jobs["bob-done"]
    visit(page, scene, f"job/{done}", "table.grid", f"{who}-job-done")
    assert "COMPLETED" in page.inner_text(".job-title")
    assert "COMPLETED" in page.locator("tr", has_text=f"{done}.batch").inner_text()  # its batch step
    assert [row.split("\t")[1] for row in page.locator("section", has_text="History").locator("tbody tr")
            .all_inner_texts()] == ["submitted", "started", "ran-as-agent-user", "completed"]  # (the harness's agents)

    visit(page, scene, "nodes", "tr[data-node='node2']", f"{who}-nodes")
    assert page.locator("tr[data-node]").count() == NODES
    assert H100 in page.inner_text("tr[data-node='node1']")
    drained = page.inner_text("tr[data-node='node3']")
    assert "drained" in drained and "fan failure" in drained

    visit(page, scene, "queues", "tr[data-queue]", f"{who}-queues")
    cells = {name: page.locator(f"tr[data-queue='{name}'] td").all_inner_texts() for name in ("biology-q", "physics-q")}
    # cohort, queue, resource, nominal, used, borrowed, lent
    assert cells["biology-q"][:7] == ["lab", "biology-q", "gpu", "3", "5", "2", "0"]
    assert cells["physics-q"][:7] == ["lab", "physics-q", "gpu", "5", "2", "0", "2"]

    visit(page, scene, "fairshare", "tr[data-account='physics']", f"{who}-fairshare")
    assert page.locator(".bars rect").count() == 2 * page.locator("tr[data-account]").count()

    visit(page, scene, "reservations", "tr[data-reservation='maint-node2']", f"{who}-reservations")
    assert "node2" in page.inner_text("tr[data-reservation='maint-node2']")

    visit(page, scene, "job/999999", ".error", f"{who}-job-unknown")  # what failed, in words
    assert page.inner_text(".error") == "GET /jobs/999999 failed (404): invalid job id specified: 999999"


def test_a_revoked_token_sends_the_user_back_to_login(page, scene: Scene) -> None:
    user = scene.users["alice"]
    made = scene.cluster.http.post(f"{API}/tokens", json={"user": user.name}).json()
    sign_in(page, made["token"])
    assert scene.cluster.http.delete(f"{API}/tokens/{made['id']}").status_code == 204
    page.goto("/#/nodes")
    page.wait_for_selector("form.login")
    assert f"token {made['id']} was revoked" in page.inner_text("#login-message")


def test_array_tasks_are_listed_and_opened_by_their_command_line_ids(page, scene: Scene) -> None:
    """The job list showed an array task by its raw id, which no command shows, and the job page refused
    `N_I`; both now use the id squeue and the CLI print."""
    cluster, alice = scene.cluster, scene.users["alice"].name
    array = submit(cluster, scene.tokens["alice"], alice, name="sweep", gpus=0, array="0-1", argv=["sleep", "600"])
    tasks = cluster.http.get(f"{API}/jobs", params={"ids": str(array)}).json()
    raw = {f"{t['array_job_id']}_{t['array_task_id']}": t["id"] for t in tasks}
    assert sorted(raw) == [f"{array}_0", f"{array}_1"] and raw[f"{array}_1"] != array
    try:
        for job_id in raw.values():
            cluster.wait_state(job_id, "RUNNING")
        sign_in(page, scene.tokens["alice"])
        visit(page, scene, f"jobs?user={alice}", "table.grid", "alice-jobs-array")
        for text in raw:
            link = page.locator(f"tr[data-job='{text}'] a")
            assert (link.inner_text(), link.get_attribute("href")) == (text, f"#/job/{text}")
        task = f"{array}_1"
        visit(page, scene, f"job/{task}", ".job-title", "alice-job-array-task")
        assert page.inner_text(".job-title").startswith(f"Job {task} sweep")
        visit(page, scene, f"job/{raw[task]}", ".job-title", "alice-job-array-task-raw")  # its own id: the same
        assert page.inner_text(".job-title").startswith(f"Job {task} sweep")
        visit(page, scene, f"job/{array}_7", ".error", "alice-job-array-no-task")
        assert page.inner_text(".error") == f"no job {array}_7: array {array} has no task 7"
    finally:
        for job_id in raw.values():
            cluster.http.post(f"{API}/jobs/{job_id}/cancel")
