"""A job's tasks reach the controller with their own job's credential (CORRAL_TOKEN), never the agent's or
the cluster's: real controller and agent, a real job."""
from __future__ import annotations

import json
import sys

import httpx
import pytest

from tests.e2e.harness import Cluster

pytestmark = pytest.mark.slow

PROBE = """
import json, os, urllib.request, urllib.error
def call(method, path, body=None):
    request = urllib.request.Request(os.environ["CORRAL_URL"] + "/api/v1" + path, method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": "Bearer " + os.environ["CORRAL_TOKEN"], "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code
node = {"node": "node1", "address": "127.0.0.1", "gpus": [], "cpus": 1, "mem_mib": 1}
print(json.dumps({
    "env": {k: v for k, v in os.environ.items() if k.startswith("CORRAL_")},
    "whoami": call("GET", "/whoami"),
    "register": call("POST", "/agents/register", node),
    "events": call("POST", "/agents/node1/events", {"events": []}),
    "tenancy": call("PUT", "/tenancy", {}),
}))
"""


def test_a_jobs_tasks_hold_only_their_jobs_credential(tmp_path):
    cluster = Cluster(tmp_path, nodes=1, gpus=1).start()
    try:
        exported = {"PATH": "/usr/bin:/bin", "CORRAL_SECRET_FILE": str(cluster.secret_file),  # as sbatch exports
                    "CORRAL_SECRET": cluster.secret, "CORRAL_TOKEN": "ct1.1.a-long-lived-token"}
        job_id = cluster.submit(argv=[sys.executable, "-c", PROBE], uid=65534, output=str(tmp_path / "probe.out"),
                                env=exported)
        job = cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=60)
        assert job["state"] == "COMPLETED", cluster.logs()
        seen = json.loads((tmp_path / "probe.out").read_text())
        assert "CORRAL_SECRET_FILE" not in seen["env"] and "CORRAL_SECRET" not in seen["env"]
        assert seen["env"]["CORRAL_TOKEN"].startswith(f"cj1.{job_id}.")
        # It acts as the job's user: not as an agent, not as an admin.
        assert (seen["whoami"], seen["register"], seen["events"], seen["tenancy"]) == (200, 403, 403, 403)
        with httpx.Client(base_url=cluster.url, headers={"Authorization": f"Bearer {seen['env']['CORRAL_TOKEN']}"},
                          trust_env=False) as http:
            reply = http.get("/api/v1/whoami")
        assert reply.status_code == 401 and "has ended" in reply.json()["detail"]  # gone with its job
    finally:
        cluster.stop()
