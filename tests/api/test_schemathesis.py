"""Schemathesis against a real controller for a minute: whatever it sends, valid or not, the API
answers without a server error, with a status code and a body that its OpenAPI schema documents.

Nodes are registered through the agent API with no agent behind them, so that fuzzed submissions
are admitted and scheduled but nothing they name is ever run on this machine."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.harness import API, Cluster

pytestmark = pytest.mark.slow
pytest.importorskip("schemathesis", reason="schemathesis (pyproject's dev extra) is not installed")

DURATION_S = 60
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


@pytest.fixture
def controller(tmp_path):
    cluster = Cluster(tmp_path, nodes=2, gpus=4)
    cluster.start_controller()
    for name in cluster.node_names:
        reply = cluster.http.post(f"{API}/agents/register", json={
            "node": name, "address": "127.0.0.1", "gpus": [{"index": i} for i in range(4)], "cpus": 16,
            "mem_mib": 64000})
        assert reply.status_code == 200, reply.text
    yield cluster
    cluster.stop()


def test_no_input_makes_the_api_fail_or_break_its_schema(controller, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "run", f"{controller.url}/openapi.json",
         "-H", f"Authorization: Bearer {controller.secret}", "--max-time", str(DURATION_S), "--workers", "1",
         "--checks", CHECKS, "--request-timeout", "70", "--report", "junit", "--report-dir", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=DURATION_S + 240, cwd=tmp_path)
    assert done.returncode == 0, f"{done.stdout[-12000:]}\n{done.stderr[-3000:]}\n{controller.logs()}"
    assert "Traceback" not in (tmp_path / "controller.log").read_text()
