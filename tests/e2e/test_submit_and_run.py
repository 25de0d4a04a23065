"""`corral submit` is sbatch (the script runs once, its srun lines make the steps) and `corral run` is
srun outside a job (the command runs as every task), against a real controller and agents."""
from __future__ import annotations

import re

import pytest

from tests.e2e.harness import Cluster
from tests.slurm.commands import Commands

pytestmark = pytest.mark.slow

THREE_STEPS = """#!/bin/sh
#SBATCH -N2 --ntasks-per-node=2 -o out.txt
echo "script on $SLURMD_NODENAME procid=$SLURM_PROCID rank=${RANK-unset} ntasks=$SLURM_NTASKS" >> marker.txt
srun sh -c 'echo "step $SLURM_STEP_ID rank $RANK"'
srun sh -c 'echo "step $SLURM_STEP_ID rank $RANK"'
srun sh -c 'echo "step $SLURM_STEP_ID rank $RANK"'
"""


@pytest.fixture(scope="module")
def corral_cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("corral"), nodes=2, gpus=4).start()
    yield cluster
    cluster.kill_controller()  # nothing here needs a clean shutdown
    cluster.stop()


@pytest.fixture
def cmd(corral_cluster, tmp_path) -> Commands:
    return Commands(corral_cluster, tmp_path)


def submitted_id(result) -> int:
    assert result.code == 0 and result.stderr == "", result
    match = re.fullmatch(r"Submitted job (\d+)\n", result.stdout)
    assert match, result
    return int(match.group(1))


def test_submit_runs_the_script_once_and_its_srun_lines_make_the_steps(cmd, corral_cluster, tmp_path):
    (tmp_path / "three.sh").write_text(THREE_STEPS)
    job_id = submitted_id(cmd("corral", "submit", "three.sh"))
    job = corral_cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=60)
    output = (tmp_path / "out.txt").read_text()
    assert job["state"] == "COMPLETED", output
    # Once, on the first node, with the batch environment: no ranks, SLURM_NTASKS from --ntasks-per-node.
    assert (tmp_path / "marker.txt").read_text() == "script on node1 procid=0 rank=unset ntasks=4\n"
    assert sorted(output.splitlines()) == sorted(f"step {s} rank {r}" for s in range(3) for r in range(4))
    assert [(s["step_id"], s["num_tasks"], s["nodelist"]) for s in job["steps"]] == [
        ("batch", 1, "node1"), ("0", 4, "node[1-2]"), ("1", 4, "node[1-2]"), ("2", 4, "node[1-2]")]
    sacct = cmd("sacct", "-j", str(job_id), "-P", "-n", "-o", "JobID")
    assert sacct.stdout.split() == [str(job_id), f"{job_id}.batch", f"{job_id}.0", f"{job_id}.1", f"{job_id}.2"]


@pytest.mark.parametrize("how", [["--wrap", "echo $SLURMD_NODENAME >> ran.txt"],
                                 ["--", "sh", "-c", "echo $SLURMD_NODENAME >> ran.txt"]])
def test_submit_wrap_and_command_run_once(cmd, corral_cluster, tmp_path, how):
    job_id = submitted_id(cmd("corral", "submit", "-N2", "--ntasks-per-node", "2", "-o", "/dev/null", *how))
    assert corral_cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=60)["state"] == "COMPLETED"
    assert (tmp_path / "ran.txt").read_text() == "node1\n"


def test_run_runs_the_command_as_every_task(cmd, corral_cluster):
    result = cmd("corral", "run", "-N2", "--ntasks-per-node", "2", "--", "sh", "-c", "echo $RANK")
    assert result.code == 0, result
    assert sorted(result.stdout.splitlines()) == ["0", "1", "2", "3"]


def test_run_gives_every_task_its_own_gpu_and_rank(cmd, corral_cluster):
    result = cmd("corral", "run", "--nodes", "2", "--ntasks-per-node", "2", "--gpus-per-task", "1", "--",
                 "sh", "-c", "echo $RANK/$WORLD_SIZE $SLURMD_NODENAME gpu=$CUDA_VISIBLE_DEVICES")
    assert result.code == 0, result
    lines = sorted(result.stdout.splitlines())
    assert [line.split()[0] for line in lines] == ["0/4", "1/4", "2/4", "3/4"]
    devices = {tuple(line.split()[1:]) for line in lines}
    assert len(devices) == 4 and {node for node, _ in devices} == {"node1", "node2"}, lines


def test_run_exits_with_the_tasks_status(cmd):
    result = cmd("corral", "run", "-n2", "sh", "-c", "exit 3")
    assert result.code == 3, result
