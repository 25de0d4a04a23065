"""`corral notebook` end to end: a real JupyterLab (the test venv's) on a real cluster, through the real
gateway. Its owner opens /lab with the printed link (the credential becomes a cookie) and runs `1+1` in a
kernel over the WebSocket; another user (a real Unix user) gets 403; left idle, it stops by itself and its GPU
is free again (the time it took is printed); a `jupyter` that is not on the node gets a clear error and
leaves nothing behind."""
from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiohttp
import httpx
import pytest

from tests.e2e.harness import API, free_port, wait_for

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("jupyter", path=os.path.dirname(sys.executable)) is None,
                                 reason="JupyterLab is not installed in the test environment (make venv installs it)")]
IDLE_S = 10


def corral(cluster, cwd: Path, *argv: str, gateway: str = "") -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "CORRAL_"))}
    env.update(CORRAL_URL=cluster.url, CORRAL_SECRET_FILE=str(cluster.secret_file),
               XDG_CONFIG_HOME=str(cwd / "no-config"), CORRAL_SYSTEM_CLUSTER_FILE=str(cwd / "no-cluster.json"),
               PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    if gateway:
        env["CORRAL_GATEWAY"] = gateway
    return subprocess.run([sys.executable, "-m", "corral.cli.main", *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=180)


@pytest.fixture
def gateway(cluster_factory, tmp_path):
    cluster = cluster_factory(nodes=1, gpus=1)
    port = free_port()
    log = open(tmp_path / "gateway.log", "ab")
    env = {**os.environ, "CORRAL_SECRET_FILE": str(cluster.secret_file)}
    process = subprocess.Popen([sys.executable, "-m", "corral.cli.main", "gateway", "--controller", cluster.url,
                                "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(healthy, 30, message="gateway health")
        yield cluster, url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)


@pytest.fixture
def other_user():
    name = f"nbk-notebook-{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name], check=True)
    try:
        yield pwd.getpwnam(name).pw_name
    finally:
        subprocess.run(["userdel", name], check=False)


async def run_in_kernel(base: str, cookies: dict[str, str], code: str) -> str:
    """Starts a kernel through the gateway and runs `code` over its WebSocket; the result's text."""
    async with aiohttp.ClientSession(cookies=cookies) as session:
        xsrf = cookies.get("_xsrf", "")
        async with session.post(f"{base}api/kernels", json={"name": "python3"},
                                headers={"X-XSRFToken": xsrf}) as reply:
            assert reply.status == 201, await reply.text()
            kernel = await reply.json()
        async with session.ws_connect(f"{base.replace('http', 'ws', 1)}api/kernels/{kernel['id']}/channels") as ws:
            msg_id = uuid.uuid4().hex
            await ws.send_str(json.dumps({
                "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "", "session": msg_id,
                           "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell",
                "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                            "allow_stdin": False, "stop_on_error": True}}))
            while True:
                message = json.loads((await ws.receive(timeout=60)).data)
                if message.get("parent_header", {}).get("msg_id") == msg_id and \
                        message["msg_type"] == "execute_result":
                    return str(message["content"]["data"]["text/plain"])


def test_a_notebook_answers_its_owner_refuses_another_user_and_stops_when_idle(gateway, tmp_path, other_user):
    cluster, gateway_url = gateway
    started = time.monotonic()
    made = corral(cluster, tmp_path, "notebook", "--gpus", "1", "--time", "10:00", "--idle-timeout", f"0:{IDLE_S}",
                  "--name", "nb-notebook-e2e", gateway=gateway_url)
    assert made.returncode == 0, made.stderr + cluster.logs()
    print(f"notebook ready {time.monotonic() - started:.1f} s after `corral notebook` started")
    link = re.search(r"^open: (\S+)$", made.stdout, re.M)
    assert link is not None, made.stdout
    job_id = int(re.search(r"job (\d+) on node1", made.stdout).group(1))
    with httpx.Client(trust_env=False, timeout=30, follow_redirects=True) as browser:
        lab = browser.get(link.group(1))
        assert lab.status_code == 200 and str(lab.url) == f"{gateway_url}/s/nb-notebook-e2e/lab"
        assert "JupyterLab" in lab.text
        cookies = {name: value for name, value in browser.cookies.items()}
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
    assert cluster.http.get(f"{API}/services/nb-notebook-e2e/endpoints").json()["upstream_authorization"]

    done = cluster.wait_state(job_id, "COMPLETED", "FAILED", "CANCELLED", timeout_s=IDLE_S + 150)
    idle_stop_s = time.monotonic() - last_activity
    assert done["state"] == "COMPLETED", done
    wait_for(lambda: cluster.http.get(f"{API}/services/nb-notebook-e2e").status_code == 404, 10,
             message="the session's service gone")
    batch = cluster.submit(argv=["true"], gpus_per_node=1, name="after-notebook")
    cluster.wait_state(batch, "COMPLETED", timeout_s=30)
    print(f"idle stop: {idle_stop_s:.1f} s after the last kernel activity (idle timeout {IDLE_S} s)")
    log = (tmp_path / f"nb-notebook-e2e-{job_id}.out").read_text()
    assert "Culling kernel" in log or "culling" in log.lower(), log[-2000:]


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
    assert made.returncode == 1 and "no gateway: pass --gateway" in made.stderr
    assert cluster.http.get(f"{API}/services").json() == []
