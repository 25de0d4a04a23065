"""`corral ray` end to end: a Ray cluster on a 2-node allocation (head on node1, a Ray node on node2, each
with the job's GPU and CPUs of its node and a custom resource named after it), reached only through the
real gateway: the printed `ray job submit` line runs a driver with one task on each node, the dashboard
(a single-page app) loads in Chromium under /s/<name>/, another user (a real Unix user) gets 403 from
both, Ray itself refuses whoever goes around the gateway, and the Ray cluster ends with the allocation
(`corral cancel`), leaving no Ray process."""
from __future__ import annotations

import json
import pwd
import re
import shlex
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import API, wait_for
from tests.ray_on_corral.conftest import BIN, HERE, ray_processes_under, run

pytestmark = pytest.mark.slow
CHROMIUM = "/usr/bin/chromium"
NAME = "ray-raygw-e2e"


@pytest.fixture
def other_user():
    name = f"raygw-{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name], check=True)
    try:
        yield pwd.getpwnam(name).pw_name
    finally:
        subprocess.run(["userdel", name], check=False)


def load_dashboard(link: str) -> tuple[str, list[str], list[str]]:
    """Loads the dashboard in Chromium from the printed link: its title, every URL it requested, and the
    requests that failed."""
    from playwright.sync_api import sync_playwright

    requested: list[str] = []
    failed: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.on("request", lambda r: requested.append(r.url))
            page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
            page.on("requestfailed", lambda r: failed.append(f"failed {r.url}"))
            page.goto(link, wait_until="networkidle", timeout=60_000)
            page.get_by_text("Cluster Status").first.wait_for(timeout=30_000)  # the overview rendered its cards
            return page.title(), requested, failed
        finally:
            browser.close()


# What Ray's dashboard itself answers when no Grafana, Prometheus or Ray Serve is set up (as it does
# without the gateway): not the gateway's doing.
RAYS_OWN_REFUSALS = {"500 api/grafana_health", "500 api/prometheus_health", "404 api/v0/platform_events",
                     "501 api/serve/applications/"}


@pytest.mark.timeout(600)  # two Ray nodes on a loaded 2-core host: a node may need a second start
def test_corral_ray_through_the_gateway_runs_a_task_on_each_node_for_its_owner_only(
        ray_cluster, ray_gateway, user_env, tmp_path, other_user):
    started = time.monotonic()
    made = run([str(BIN / "corral"), "ray", "--nodes", "2", "--gpus-per-node", "1", "--cpus-per-node", "2",
                "--time", "10:00", "--object-store-mib", "100", "--name", NAME, "--gateway", ray_gateway],
               user_env, tmp_path, timeout_s=300)
    assert made.returncode == 0, made.stdout + made.stderr + ray_cluster.logs()
    print(f"Ray cluster answering through the gateway {time.monotonic() - started:.1f} s after `corral ray` started")
    job_id = int(re.search(r"job (\d+), head on node1", made.stdout).group(1))
    link = re.search(r"^dashboard: (\S+)$", made.stdout, re.M).group(1)
    submit_line = re.search(r"^submit: (.+)$", made.stdout, re.M).group(1)
    token = re.search(r"corral_token=(\S+)$", link).group(1)
    try:
        driver = tmp_path / "driver"
        driver.mkdir()
        shutil.copy(HERE / "ray_two_nodes.py", driver / "ray_two_nodes.py")
        # The printed line as the user types it, their own program in place of the example's.
        assert submit_line.endswith(" --working-dir . -- python my_program.py"), submit_line
        ours = submit_line.replace("python my_program.py", "python ray_two_nodes.py --pin=node1,node2")
        submitted = run(["sh", "-c", ours], user_env, driver, timeout_s=300)
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        tasks = [line.split()[2] for line in submitted.stdout.splitlines() if line.startswith("task on ")]
        assert tasks == ["node1", "node2"], submitted.stdout

        # Each Ray node holds its node's share of the job: 2 CPUs and 1 GPU, and a resource named after it.
        base = f"{ray_gateway}/s/{NAME}/"
        mine = {"Authorization": f"Bearer {token}"}
        listed = httpx.get(f"{base}api/v0/nodes?limit=100", headers=mine, timeout=30, trust_env=False)
        assert listed.status_code == 200, listed.text
        shares = sorted((n["resources_total"].get("CPU"), n["resources_total"].get("GPU"),
                         "node1" in n["resources_total"], "node2" in n["resources_total"])
                        for n in listed.json()["data"]["result"]["result"] if n["state"] == "ALIVE")
        assert shares == [(2.0, 1.0, False, True), (2.0, 1.0, True, False)], listed.text

        if Path(CHROMIUM).exists():
            title, requested, failed = load_dashboard(link)
            assert title.endswith("Ray Dashboard"), title
            assert requested and all(url.startswith(base) for url in requested), \
                "every page, script and API call stays under the route's prefix (relative URLs)"
            assert {f"{f.split()[0]} {f.split()[1][len(base):]}" for f in failed} <= RAYS_OWN_REFUSALS, failed

        other = ray_cluster.http.post(f"{API}/tokens", json={"user": other_user, "description": "raygw test"})
        assert other.status_code == 201, other.text
        theirs = {"Authorization": f"Bearer {other.json()['token']}"}
        refused = httpx.get(base, headers=theirs, timeout=30, trust_env=False)
        assert refused.status_code == 403 and other_user in refused.json()["detail"], refused.text
        their_line = ours.replace(shlex.quote(json.dumps(mine)), shlex.quote(json.dumps(theirs)))
        assert their_line != ours
        refused_job = run(["sh", "-c", their_line], user_env, driver, timeout_s=120)
        # Ray's client words the gateway's 403 as its own AuthenticationError, with the gateway's reason.
        assert refused_job.returncode != 0 and f"may open it, not {other_user}" in refused_job.stderr, \
            refused_job.stderr[-2000:]

        # Around the gateway, straight to the dashboard's port on the node: Ray's token auth refuses.
        replica = ray_cluster.http.get(f"{API}/services/{NAME}").json()["replicas"][0]
        direct = httpx.get(f"http://{replica['endpoints']['dashboard']}/api/jobs/", timeout=30, trust_env=False)
        assert direct.status_code == 401, direct.text
    finally:
        cancelled = run([str(BIN / "corral"), "cancel", str(job_id)], user_env, tmp_path)
        # Before the module's cluster stops: processes of a job still running then would outlive it.
        ray_cluster.wait_state(job_id, "CANCELLED", timeout_s=60)
    assert cancelled.returncode == 0, cancelled.stderr
    wait_for(lambda: ray_cluster.http.get(f"{API}/services/{NAME}").status_code == 404, 30,
             message="the Ray cluster's session gone with its allocation")
    deadline = time.monotonic() + 30
    while (left := ray_processes_under(f"corral-ray-{job_id}")) and time.monotonic() < deadline:
        time.sleep(1)
    assert not left, left
    gone = httpx.get(f"{ray_gateway}/s/{NAME}/", headers={"Authorization": f"Bearer {token}"}, timeout=30,
                     trust_env=False)
    assert gone.status_code in (404, 503), gone.text


def test_corral_ray_without_ray_on_the_nodes_says_so_and_leaves_nothing(ray_cluster, ray_gateway, user_env,
                                                                         tmp_path):
    without_ray = {**user_env, "PATH": "/usr/local/bin:/usr/bin:/bin"}
    made = run([str(BIN / "corral"), "ray", "--nodes", "2", "--time", "5:00", "--name", "ray-raygw-noray",
                "--gateway", ray_gateway], without_ray, tmp_path, timeout_s=180)
    assert made.returncode == 1, made.stdout + made.stderr
    assert "ended before it was up" in made.stderr and "'ray' is not on PATH on" in made.stderr, made.stderr
    assert ray_cluster.http.get(f"{API}/services/ray-raygw-noray").status_code == 404
    tokens = ray_cluster.http.get(f"{API}/tokens").json()
    assert not [t for t in tokens if t.get("description") == "ray ray-raygw-noray" and not t.get("revoked")], tokens


def test_corral_ray_refuses_zero_nodes_and_no_gateway_before_starting_anything(user_env, tmp_path):
    refused = run([str(BIN / "corral"), "ray", "--nodes", "0", "--gateway", "http://gw"], user_env, tmp_path)
    assert refused.returncode == 2 and "Invalid value for '--nodes' / '-N'" in refused.stderr, refused
    no_gateway = {k: v for k, v in user_env.items() if k != "CORRAL_GATEWAY"}
    refused = run([str(BIN / "corral"), "ray", "--nodes", "1"], no_gateway, tmp_path)
    assert refused.returncode == 1 and "no gateway: the cluster names none" in refused.stderr, refused
