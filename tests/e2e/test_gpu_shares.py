"""End to end: Slurm's `--gres=shard:N` / `mps:P` put jobs on shares of one (simulated) GPU, whose tasks
get the CUDA MPS variables that bound them, and the configured placement decides which device a share
goes to."""
from __future__ import annotations

import pytest

from tests.e2e.harness import wait_for
from tests.slurm.commands import Commands

pytestmark = pytest.mark.slow

BASE = "kill_grace_s = 2\nnode_timeout_s = 15\n"


def _environment(path) -> dict[str, str]:
    wait_for(path.exists, message=f"{path} written")
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_shard_jobs_share_a_device_while_a_whole_gpu_job_takes_the_other(cluster_factory, tmp_path):
    cluster = cluster_factory(nodes=1, gpus=2, config=BASE)
    cmd = Commands(cluster, tmp_path)
    shard_jobs = []
    for name in ("a", "b"):
        out = tmp_path / f"env-{name}"
        shard_jobs.append((cmd.submit("--gres=shard:2", "-o", "/dev/null", "--wrap",
                                      f"env > {out}.tmp && mv {out}.tmp {out}; sleep 60"), out))
    whole = cmd.submit("--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 60")
    devices = {}
    for job_id in (*(j for j, _ in shard_jobs), whole):
        job = cluster.wait_state(job_id, "RUNNING")
        devices[job_id] = (job["slices"][0]["gpus"], job["slices"][0]["gpu_milli"])
    (first, _), (second, _) = shard_jobs
    assert devices[first] == devices[second] and devices[first][1] == 250, devices  # 2 of 8 shards
    assert devices[whole][1] == 1000 and devices[whole][0] != devices[first][0], devices
    device = devices[first][0][0]
    for _, out in shard_jobs:
        env = _environment(out)
        assert env["CUDA_VISIBLE_DEVICES"] == str(device)
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"  # a quarter of the simulated 80 GiB
        assert env["SLURM_SHARDS_ON_NODE"] == "2"
    squeue = cmd("squeue", "-h", "-o", "%i %b", "--sort=i")
    assert squeue.stdout.split("\n")[:3] == [f"{first} gres:shard:2", f"{second} gres:shard:2",
                                              f"{whole} gres:gpu:1"], squeue
    show = cmd("scontrol", "show", "job", str(first))
    assert "gres/shard=2" in show.stdout and "TresPerNode=gres:shard:2" in show.stdout, show


def test_slurm_refusals_of_shares_reach_the_user(cluster_factory, tmp_path):
    cluster = cluster_factory(nodes=1, gpus=1, config=BASE + "shards_per_gpu = 4\n")
    cmd = Commands(cluster, tmp_path)
    refused = cmd("sbatch", "--gres=shard:5", "--wrap", "true")
    assert refused.code == 1 and "a job takes 1 to 4 shards of one GPU per node" in refused.stderr, refused
    mixed = cmd("sbatch", "--gres=gpu:1,mps:50", "--wrap", "true")
    assert mixed.code == 1 and "gpu and mps cannot be combined" in mixed.stderr, mixed


@pytest.mark.parametrize(("scheduler", "second_on_other_device"), [
    ('placement = "bestfit"\n', False),
    # FGD expects 6-shard (750 milli) tasks: packing the second 2-shard job beside the first would leave
    # neither device able to take one, so it goes to the free device.
    ('placement = "fgd"\ntask_mix = [{gpus = 1, gpu_milli = 750}]\n', True),
], ids=["bestfit", "fgd"])
def test_the_configured_placement_chooses_the_device_of_a_share(cluster_factory, tmp_path, scheduler,
                                                                 second_on_other_device):
    cluster = cluster_factory(nodes=1, gpus=2, config=BASE + "[scheduler]\n" + scheduler)
    cmd = Commands(cluster, tmp_path)
    placed = []
    for _ in range(2):  # one at a time: the second is placed knowing where the first runs
        job_id = cmd.submit("--gres=shard:2", "-o", "/dev/null", "--wrap", "sleep 60")
        placed.append(cluster.wait_state(job_id, "RUNNING")["slices"][0]["gpus"])
    assert (placed[0] != placed[1]) is second_on_other_device, placed
