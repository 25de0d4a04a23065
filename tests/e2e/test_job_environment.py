"""A job's environment is its own and corral's, never the agent's (issue 21, item 6): a real agent started
with secrets in its environment runs a batch job and an srun step, and neither sees them."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.harness import wait_for
from tests.e2e.test_jobs import read_env

pytestmark = pytest.mark.slow

# Set only for the agent, as an operator's unit file or shell would.
AGENT_ONLY = {"HTTPS_PROXY": "http://agent:hunter2@proxy.envgaps:3128", "AWS_SECRET_ACCESS_KEY": "envgaps-key",
              "ENVGAPS_AGENT_ONLY": "1"}

SCRIPT = """#!/bin/sh
env > "{out}/batch.env"
srun -n1 sh -c 'env > "{out}/step.env"'
"""


@pytest.fixture
def cluster_with_secret_agent(cluster_factory):
    cluster = cluster_factory(nodes=0)
    cluster.node_names = ["node1"]
    cluster.start_agent("node1", env=AGENT_ONLY)
    wait_for(lambda: any(n["name"] == "node1" and n["state"] != "down" for n in cluster.nodes()),
             message="agent registered")
    return cluster


def test_jobs_get_their_submitted_environment_and_corrals_not_the_agents(cluster_with_secret_agent,
                                                                          tmp_path: Path) -> None:
    cluster = cluster_with_secret_agent
    out = tmp_path / "env"
    out.mkdir()
    submitted = {"PATH": os.environ["PATH"], "ENVGAPS_SUBMITTED": "kept", "CORRAL_URL": "http://127.0.0.1:9"}
    job_id = cluster.submit(script=SCRIPT.format(out=out), batch=True, env=submitted)
    job = cluster.wait_state(job_id, "COMPLETED", "FAILED")
    assert job["state"] == "COMPLETED", cluster.logs()
    for dump in ("batch.env", "step.env"):
        env = read_env(out / dump)
        leaked = sorted(set(AGENT_ONLY) & set(env))
        assert not leaked, f"{dump}: the agent's own variables reached the job: {leaked}"
        assert env["ENVGAPS_SUBMITTED"] == "kept", dump
        assert env["SLURM_JOB_ID"] == str(job_id), dump
        # The controller as this node reaches it, and the job's own credential.
        assert env["CORRAL_URL"] == cluster.url and env["CORRAL_TOKEN"].startswith("cj1."), dump
    assert read_env(out / "step.env")["SLURM_STEP_ID"] == "0"


def test_a_job_that_exports_nothing_gets_corrals_variables_and_a_default_path(cluster_with_secret_agent,
                                                                              tmp_path: Path) -> None:
    """What `sbatch --export=NONE` submits: no variable of the submitter's."""
    cluster = cluster_with_secret_agent
    out = tmp_path / "none.env"
    job_id = cluster.submit(script=f'#!/bin/sh\n/usr/bin/env > "{out}"\n', batch=True, env={})
    cluster.wait_state(job_id, "COMPLETED")
    env = read_env(out)
    assert not set(AGENT_ONLY) & set(env)
    bin_dir, _, rest = env["PATH"].partition(":")
    assert (Path(bin_dir) / "srun").exists() and rest == "/usr/local/bin:/usr/bin:/bin"
    assert env["SLURM_JOB_ID"] == str(job_id) and env["CORRAL_URL"] == cluster.url
