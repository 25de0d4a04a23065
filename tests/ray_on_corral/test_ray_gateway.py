"""`ray job submit` through corral's service gateway: Ray's job-submission client under the gateway's
`/s/<name>/` prefix, with the user's corral credential for the gateway and the Ray cluster's token for
Ray both sent by Ray's RAY_JOB_HEADERS (or `--headers`); refused without the corral credential.

The gateway's route to the Ray head comes from a StaticSource here: the controller's endpoint table for
a job that is not a service (the owner-only session routes) is the notebook work's, not yet merged."""
from __future__ import annotations

import json
import re
import shutil
import time

import pytest

from corral.gateway.routes import Endpoint, ServiceRoute
from corral.gateway.sources import StaticSource
from tests.gateway.harness import authenticating_gateway
from tests.ray_on_corral.conftest import BIN, HERE, ray_client_env, ray_processes_under, run

pytestmark = pytest.mark.slow


def test_ray_job_submit_through_the_gateway_with_the_users_credential(ray_cluster, user_env, tmp_path):
    started = run([str(BIN / "corral"), "ray", "--nodes", "1", "--cpus-per-node", "2", "--time", "10"],
                  user_env, tmp_path, timeout_s=300)
    assert started.returncode == 0, started.stdout + started.stderr
    job_id = int(re.search(r"Submitted job (\d+)", started.stdout).group(1))
    address = re.search(r"^RAY_ADDRESS=http://(\S+)$", started.stdout, re.MULTILINE).group(1)
    secret = ray_cluster.secret_file.read_text().strip()
    name = f"ray-{job_id}"
    node = ray_cluster.job(job_id)["nodelist"]  # node1 or node2, as the scheduler chose
    source = StaticSource(ServiceRoute(name, (Endpoint(address),), public=False))
    try:
        with authenticating_gateway(source, ray_cluster.url, secret, ttl_s=5, stale_s=60) as gateway:
            through = f"{gateway.url}/s/{name}"
            driver = tmp_path / "driver"
            driver.mkdir()
            shutil.copy(HERE / "ray_two_nodes.py", driver / "ray_two_nodes.py")
            submit = [str(BIN / "ray"), "job", "submit", "--address", through, "--working-dir", str(driver),
                      "--", "python", "ray_two_nodes.py", f"--pin={node}"]
            ray_token = open(ray_client_env(started.stdout, {})["RAY_AUTH_TOKEN_PATH"]).read().strip()
            refused = run(submit, {**user_env, "RAY_JOB_HEADERS": json.dumps(
                {"X-Ray-Authorization": f"Bearer {ray_token}"})}, tmp_path, timeout_s=120)
            assert refused.returncode != 0, refused.stdout
            assert "this service needs a credential" in refused.stderr, refused.stderr[-2000:]
            # The corral credential for the gateway (it stays there), Ray's token for Ray (passed on).
            headers = json.dumps({"Authorization": f"Bearer {secret}", "X-Ray-Authorization": f"Bearer {ray_token}"})
            submitted = run(submit, {**user_env, "RAY_JOB_HEADERS": headers}, tmp_path, timeout_s=240)
            assert submitted.returncode == 0, submitted.stdout + submitted.stderr
            assert [line.split()[2] for line in submitted.stdout.splitlines()
                    if line.startswith("task on ")] == [node], submitted.stdout
    finally:
        run([str(BIN / "corral"), "cancel", str(job_id)], user_env, tmp_path)
        # Before the cluster's agents stop: a step killed with its agent would leave Ray behind.
        ray_cluster.wait_state(job_id, "CANCELLED", timeout_s=60)
        deadline = time.monotonic() + 30
        while ray_processes_under(f"corral-ray-{job_id}") and time.monotonic() < deadline:
            time.sleep(1)
