"""`corral ray`: a Ray cluster on a 2-node allocation (head on node1, a Ray node on node2, each with the
job's GPU and CPUs of its node and a custom resource named after it), `ray job submit` against the
RAY_ADDRESS it prints running a driver with one task on each node, and the Ray cluster ending with the
allocation (`corral cancel`)."""
from __future__ import annotations

import os
import re
import shutil
import stat
import time

import pytest

from tests.ray_on_corral.conftest import BIN, HERE, ray_client_env, ray_processes_under, run

pytestmark = pytest.mark.slow


def test_corral_ray_then_ray_job_submit_runs_one_task_on_each_node(ray_cluster, user_env, tmp_path):
    started = run([str(BIN / "corral"), "ray", "--nodes", "2", "--gpus-per-node", "1", "--cpus-per-node", "2",
                   "--time", "10"], user_env, tmp_path, timeout_s=300)
    assert started.returncode == 0, started.stdout + started.stderr
    job_id = int(re.search(r"Submitted job (\d+)", started.stdout).group(1))
    client_env = ray_client_env(started.stdout, user_env)
    try:
        token_file = client_env["RAY_AUTH_TOKEN_PATH"]
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
        driver = tmp_path / "driver"
        driver.mkdir()
        shutil.copy(HERE / "ray_two_nodes.py", driver / "ray_two_nodes.py")
        submit = [str(BIN / "ray"), "job", "submit", "--working-dir", str(driver),
                  "--", "python", "ray_two_nodes.py", "--pin=node1,node2"]
        # Without the token, the job API refuses (anyone reaching the port could otherwise run code as us).
        anonymous = {k: v for k, v in client_env.items() if not k.startswith("RAY_AUTH_")}
        refused = run(submit, anonymous, tmp_path, timeout_s=120)
        assert refused.returncode != 0 and "Token authentication is enabled" in refused.stderr, refused.stderr
        submitted = run(submit, client_env, tmp_path, timeout_s=240)
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        tasks = [line.split()[2] for line in submitted.stdout.splitlines() if line.startswith("task on ")]
        assert tasks == ["node1", "node2"], submitted.stdout
        # Each Ray node holds its node's share of the job: 2 CPUs and 1 GPU, twice.
        status = run([str(BIN / "ray"), "status", "--address", re.search(r"^RAY_HEAD=(\S+)$", (
            tmp_path / f"ray-{job_id}.out").read_text(), re.MULTILINE).group(1)], client_env, tmp_path)
        assert re.search(r"\b4\.0 CPU\b", status.stdout) and re.search(r"\b2\.0 GPU\b", status.stdout), status.stdout
    finally:
        cancelled = run([str(BIN / "corral"), "cancel", str(job_id)], user_env, tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr
    ray_cluster.wait_state(job_id, "CANCELLED", timeout_s=60)
    deadline = time.monotonic() + 30
    while (left := ray_processes_under(f"corral-ray-{job_id}")) and time.monotonic() < deadline:
        time.sleep(1)
    assert not left, left


def test_corral_ray_without_ray_on_the_nodes_says_so_and_gives_the_allocation_back(ray_cluster, user_env, tmp_path):
    without_ray = {**user_env, "PATH": "/usr/local/bin:/usr/bin:/bin"}
    started = run([str(BIN / "corral"), "ray", "--nodes", "2", "--time", "5"], without_ray, tmp_path, timeout_s=120)
    assert started.returncode == 1, started.stdout + started.stderr
    assert "before its Ray cluster was up: 'ray' is not on PATH on" in started.stderr, started.stderr
    job_id = int(re.search(r"Submitted job (\d+)", started.stdout).group(1))
    assert ray_cluster.job(job_id)["state"] == "FAILED"


def test_corral_ray_refuses_zero_nodes_before_submitting(user_env, tmp_path):
    refused = run([str(BIN / "corral"), "ray", "--nodes", "0", "--time", "5"], user_env, tmp_path)
    assert refused.returncode == 1 and "--nodes must be at least 1, not 0" in refused.stderr, refused
    assert "Submitted" not in refused.stdout
