"""What the notebook end-to-end tests share: a cluster whose one GPU is sampled through the stand-in NVML
every second (its utilisation set by the test), the gateway in front of it, `corral notebook` as a user runs
it, and a kernel run over JupyterLab's WebSocket through the gateway."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx
import pytest

from tests.e2e.harness import Cluster, free_port, wait_for

needs_jupyter = pytest.mark.skipif(shutil.which("jupyter", path=os.path.dirname(sys.executable)) is None,
                                   reason="JupyterLab is not installed in the test environment (make venv installs it)")


def notebook_cluster(root: Path, config: str = "") -> Cluster:
    """One node with one GPU through the stand-in NVML, sampled every second (0% busy unless the test
    says otherwise: `set_gpu_util`)."""
    return Cluster(root, nodes=1, nvml_names={"node1": ["NVIDIA H100 80GB HBM3"]}, config=config,
                   agent_args=("--tasks-as-agent-user", "--no-cgroups", "--acctg-freq", "1"))


def set_gpu_util(cluster: Cluster, percent: int) -> None:
    """The GPU's utilisation from now on, as the agent's next NVML sample reads it."""
    path = cluster.nvml_faults("node1")
    path.with_suffix(".tmp").write_text(json.dumps({"util": {"0": percent}}))
    path.with_suffix(".tmp").replace(path)


@contextlib.contextmanager
def gateway_for(cluster: Cluster, log_dir: Path, port: int | None = None) -> Iterator[str]:
    """`corral gateway` in front of the cluster (on `port`, else a free one); its URL."""
    port = port or free_port()
    log = open(log_dir / "gateway.log", "ab")
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
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
        log.close()


def corral(cluster: Cluster, cwd: Path, *argv: str, gateway: str = "") -> subprocess.CompletedProcess:
    """A corral command as a user runs it (the cluster's secret: the user `tester`)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "CORRAL_"))}
    env.update(CORRAL_URL=cluster.url, CORRAL_SECRET_FILE=str(cluster.secret_file),
               XDG_CONFIG_HOME=str(cwd / "no-config"), CORRAL_SYSTEM_CLUSTER_FILE=str(cwd / "no-cluster.json"),
               PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    if gateway:
        env["CORRAL_GATEWAY"] = gateway
    return subprocess.run([sys.executable, "-m", "corral.cli.main", *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=180)


def started_notebook(made: subprocess.CompletedProcess) -> tuple[int, str]:
    """The job id and the link `corral notebook` printed."""
    link = re.search(r"^open: (\S+)$", made.stdout, re.M)
    job = re.search(r"job (\d+) on node1", made.stdout)
    assert link is not None and job is not None, made.stdout + made.stderr
    return int(job.group(1)), link.group(1)


def browser_cookies(link: str) -> dict[str, str]:
    """Open the link as a browser does (the credential becomes a cookie); the cookies it then holds."""
    with httpx.Client(trust_env=False, timeout=30, follow_redirects=True) as browser:
        lab = browser.get(link)
        assert lab.status_code == 200 and "JupyterLab" in lab.text, lab.text[:500]
        assert str(lab.url).endswith("/lab"), lab.url  # the credential left the URL for a cookie
        return {name: value for name, value in browser.cookies.items()}


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


def wait_for_line(path: Path, text: str, timeout_s: float) -> float:
    """Wait until `text` is in the file; when it was first seen (time.time())."""
    wait_for(lambda: path.exists() and text in path.read_text(errors="replace"), timeout_s, interval_s=0.1,
             message=f"{text!r} in {path.name}")
    return time.time()


def stop_sessions(cluster: Cluster) -> None:
    """Delete every service left (a failed test's notebook: its JupyterLab would outlive the agent) and wait
    for the jobs to end."""
    if cluster.controller is None or cluster.controller.poll() is not None:
        return
    for service in cluster.http.get("/api/v1/services").json():
        cluster.http.delete(f"/api/v1/services/{service['name']}")
    wait_for(lambda: all(j["state"] not in ("RUNNING", "COMPLETING") for j in cluster.http.get("/api/v1/jobs").json()),
             30, message="the sessions' jobs ended")
