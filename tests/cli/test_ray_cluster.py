"""`corral ray`'s batch script and job options, without Ray (tests/ray_on_corral runs them on clusters)."""
from __future__ import annotations

import subprocess

import pytest

from corral.cli.errors import CliError
from corral.cli.ray_cluster import job_tokens, ray_script


def test_the_token_path_is_quoted_for_the_shell_and_takes_the_job_id(tmp_path):
    odd = tmp_path / "a dir; $(touch pwned) 'q'"
    odd.mkdir()
    script = ray_script(1, 2, f"{odd}/ray-%j.token")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    first_lines = script.split("\nnodes=")[0]  # up to the token: no scontrol or srun needed
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    (stand_in / "ray").write_text("#!/bin/sh\n")
    (stand_in / "ray").chmod(0o755)
    env = {"SLURM_JOB_ID": "77", "PATH": f"{stand_in}:/usr/bin:/bin"}
    result = subprocess.run(["bash", "-c", first_lines], env=env, cwd=tmp_path, text=True, capture_output=True)
    token = odd / "ray-77.token"
    assert token.is_file() and len(token.read_text().strip()) == 64, result
    assert token.stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "pwned").exists()


def test_each_ray_node_gets_the_nodes_share_and_a_resource_named_after_it():
    script = ray_script(3, 8, "/tmp/ray-%j.token")
    assert "ray start --block --num-cpus 8 --num-gpus 3" in script
    assert '--resources "{\\"$node\\": 1}"' in script


@pytest.mark.parametrize(("nodes", "gpus", "cpus", "message"), [
    (0, 0, 1, "--nodes must be at least 1, not 0"),
    (1, -1, 1, "--gpus-per-node must be 0 or more and --cpus-per-node 1 or more"),
    (1, 0, 0, "--gpus-per-node must be 0 or more and --cpus-per-node 1 or more"),
])
def test_bad_sizes_are_refused(nodes, gpus, cpus, message):
    with pytest.raises(CliError, match=message):
        job_tokens(nodes, gpus, cpus, "10", "ray-%j.out", None, "ray")


def test_the_job_is_one_task_per_node_with_the_asked_sizes():
    assert job_tokens(2, 1, 4, "1:00:00", "ray-%j.out", "gpu", "ray") == [
        "--nodes", "2", "--ntasks-per-node", "1", "--cpus-per-task", "4", "--time", "1:00:00",
        "--output", "ray-%j.out", "--job-name", "ray", "--gpus-per-node", "1", "--partition", "gpu"]
