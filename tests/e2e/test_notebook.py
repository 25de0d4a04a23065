"""`corral notebook` end to end: a real JupyterLab (the test venv's) on a real cluster, through the real
gateway. Its owner opens /lab with the printed link (the credential becomes a cookie) and runs `1+1` in a
kernel over the WebSocket; another user (a real Unix user) gets 403; left idle (kernels and GPU), it is stopped
and its GPU is free again (the time it took is printed); a `jupyter` that is not on the node gets a clear error
and leaves nothing behind. The GPU-utilisation half of idleness and the reclaim by a preempting job are in
test_notebook_reclaim.py."""
from __future__ import annotations

import asyncio
import pwd
import subprocess
import time
import uuid

import httpx
import pytest

from tests.e2e.harness import API, wait_for
from tests.e2e.notebooks import (
    browser_cookies,
    corral,
    gateway_for,
    needs_jupyter,
    notebook_cluster,
    run_in_kernel,
    started_notebook,
    stop_sessions,
)

pytestmark = [pytest.mark.slow, needs_jupyter]
IDLE_S = 10


@pytest.fixture
def gateway(tmp_path):
    cluster = notebook_cluster(tmp_path).start()
    try:
        with gateway_for(cluster, tmp_path) as url:
            yield cluster, url
    finally:
        stop_sessions(cluster)
        cluster.stop()


@pytest.fixture
def other_user():
    name = f"nbk-notebook-{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name], check=True)
    try:
        yield pwd.getpwnam(name).pw_name
    finally:
        subprocess.run(["userdel", name], check=False)


def test_a_notebook_answers_its_owner_refuses_another_user_and_stops_when_idle(gateway, tmp_path, other_user):
    cluster, gateway_url = gateway
    started = time.monotonic()
    made = corral(cluster, tmp_path, "notebook", "--gpus", "1", "--time", "10:00", "--idle-timeout", f"0:{IDLE_S}",
                  "--name", "nb-notebook-e2e", gateway=gateway_url)
    assert made.returncode == 0, made.stderr + cluster.logs()
    print(f"notebook ready {time.monotonic() - started:.1f} s after `corral notebook` started")
    job_id, link = started_notebook(made)
    cookies = browser_cookies(link)
    assert "corral_token" in cookies and "_xsrf" in cookies
    base = f"{gateway_url}/s/nb-notebook-e2e/"
    assert asyncio.run(run_in_kernel(base, cookies, "1+1")) == "2"
    last_activity = time.monotonic()

    other = cluster.http.post(f"{API}/tokens", json={"user": other_user, "description": "notebook test"})
    assert other.status_code == 201, other.text
    refused = httpx.get(f"{base}lab", headers={"Authorization": f"Bearer {other.json()['token']}"})
    assert refused.status_code == 403 and other_user in refused.json()["detail"]

    # Around the gateway, straight to JupyterLab's port on the node: refused without the session's secret.
    replica = cluster.http.get(f"{API}/services/nb-notebook-e2e").json()["replicas"][0]
    direct = httpx.get(f"http://{replica['endpoints']['http']}/s/nb-notebook-e2e/api/kernels")
    assert direct.status_code == 403, direct.text
    seen_by_other = httpx.get(f"{cluster.url}{API}/services/nb-notebook-e2e/endpoints",
                              headers={"Authorization": f"Bearer {other.json()['token']}"}).json()
    assert seen_by_other["upstream_authorization"] == "", "the secret goes to the gateway only"
    secret = cluster.http.get(f"{API}/services/nb-notebook-e2e/endpoints").json()["upstream_authorization"]
    assert secret.startswith("Bearer ")  # Ray reads Bearer; JupyterLab takes it too
    # JupyterLab's pages would carry its token for their scripts: the session's pages leave it out.
    page = httpx.get(f"{base}lab", cookies=cookies, trust_env=False)
    assert page.status_code == 200 and '"token": ""' in page.text and secret.split()[1] not in page.text

    done = cluster.wait_state(job_id, "COMPLETED", "FAILED", "CANCELLED", timeout_s=IDLE_S + 90)
    idle_stop_s = time.monotonic() - last_activity
    why = "idle for 0:10: kernels idle and GPU utilisation below 5%"
    assert done["state"] == "CANCELLED" and done["history"][-1]["reason"] == why, done
    wait_for(lambda: cluster.http.get(f"{API}/services/nb-notebook-e2e").status_code == 404, 10,
             message="the session's service gone")
    batch = cluster.submit(argv=["true"], gpus_per_node=1, name="after-notebook")
    cluster.wait_state(batch, "COMPLETED", timeout_s=30)
    print(f"idle stop: {idle_stop_s:.1f} s after the last kernel activity (idle timeout {IDLE_S} s)")
    log = (tmp_path / f"nb-notebook-e2e-{job_id}.out").read_text()
    assert f"corral: this session is stopped: {why}\n" in log, log[-2000:]


def test_a_jupyter_not_found_on_the_node_is_a_clear_error_and_leaves_nothing(gateway, tmp_path):
    cluster, gateway_url = gateway
    made = corral(cluster, tmp_path, "notebook", "--time", "5:00", "--jupyter", "jupyter-missing-notebook",
                  "--name", "nb-missing-notebook", gateway=gateway_url)
    assert made.returncode == 1
    assert "corral: error: notebook nb-missing-notebook (job" in made.stderr
    assert "corral notebook: jupyter-missing-notebook is not found on" in made.stderr
    assert cluster.http.get(f"{API}/services/nb-missing-notebook").status_code == 404
    tokens = cluster.http.get(f"{API}/tokens").json()
    assert all(t["revoked"] for t in tokens if t["description"] == "notebook nb-missing-notebook"), tokens


def test_without_a_gateway_nothing_is_submitted(gateway, tmp_path):
    cluster, _ = gateway
    made = corral(cluster, tmp_path, "notebook", "--time", "5:00")
    assert made.returncode == 1 and "no gateway: the cluster names none ([gateway] url in its config)" in made.stderr
    assert cluster.http.get(f"{API}/services").json() == []
