"""Ray's documented Slurm recipe (slurm-basic.sh, as Ray ships it) runs on corral unchanged, with Ray
from PyPI: `srun -w <node>` steps start the head and a worker inside the allocation, and the driver runs
one task on each of the 2 nodes, each task on its own corral node."""
from __future__ import annotations

import shutil
import time

import pytest

from tests.ray_on_corral.conftest import HERE, ray_processes_under, run

pytestmark = pytest.mark.slow


def test_rays_slurm_recipe_runs_one_task_on_each_of_two_nodes(ray_cluster, user_env, tmp_path):
    shutil.copy(HERE / "slurm-basic.sh", tmp_path / "slurm-basic.sh")
    shutil.copy(HERE / "ray_two_nodes.py", tmp_path / "simple-trainer.py")
    submitted = run(["sbatch", "--parsable", "-o", "ray.out", "slurm-basic.sh"], user_env, tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout)
    try:
        job = ray_cluster.wait_state(job_id, "COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", timeout_s=240)
    finally:
        run(["scancel", str(job_id)], user_env, tmp_path)  # nothing left running if the wait failed
    output = (tmp_path / "ray.out").read_text()
    assert job["state"] == "COMPLETED", output
    tasks = sorted(line.split()[2] for line in output.splitlines() if line.startswith("task on "))
    assert tasks == ["node1", "node2"], output
    # The job's end ends its steps, and with them every Ray process they started.
    deadline = time.monotonic() + 30
    markers = ("--port=6379", "gcs_server_port=6379")
    while (left := [p for m in markers for p in ray_processes_under(m)]) and time.monotonic() < deadline:
        time.sleep(1)
    assert not left, left
