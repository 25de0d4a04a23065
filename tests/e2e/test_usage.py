"""Issue 14's check: sstat shows a running job's sampled figures, and once it ended sacct shows its
MaxRSS and TRESUsageInMax (here from psutil, the agents being outside cgroups, and from NVML through the
fake pynvml, whose devices report the utilisation and memory the test sets)."""
from __future__ import annotations

import sys

import pytest

from tests.e2e.harness import Cluster, wait_for
from tests.slurm.commands import Commands

pytestmark = pytest.mark.slow

MIB = 1024 * 1024
# Holds 100 MiB (every page touched) and burns CPU until told to stop.
HOG = f"""#!/bin/sh
#SBATCH -o out.txt --gres=gpu:1
{sys.executable} - <<'EOF'
import os, time
x = bytearray(100 << 20)
x[::4096] = b'1' * len(x[::4096])
print('holding 100 MiB', flush=True)
open('ready', 'w').close()
deadline = time.time() + 60
while not os.path.exists('stop') and time.time() < deadline:
    sum(range(10000))
EOF
"""
UNITS = {"": 1, "K": 1024, "M": MIB, "G": 1024 * MIB}


def as_bytes(text: str) -> float:
    number = text.rstrip("KMG")
    return float(number) * UNITS[text[len(number):]]


@pytest.fixture
def make_cluster(tmp_path, monkeypatch):
    made: list[Cluster] = []

    def make(gpu_util_pct: int, config: str = "") -> Cluster:
        monkeypatch.setenv("FAKE_NVML_UTIL", str(gpu_util_pct))  # the agent's fake NVML reads them
        monkeypatch.setenv("FAKE_NVML_USED_MIB", "2048")
        cluster = Cluster(tmp_path, nodes=1, nvml_names={"node1": ["NVIDIA H100 80GB HBM3"]},
                          config="kill_grace_s = 2\nnode_timeout_s = 15\n" + config,
                          agent_args=("--tasks-as-agent-user", "--no-cgroups", "--acctg-freq", "1"))
        made.append(cluster)
        return cluster.start()

    yield make
    for cluster in made:
        cluster.stop()


@pytest.fixture
def cluster(make_cluster):
    return make_cluster(73)


def test_sstat_shows_a_running_jobs_usage_and_sacct_keeps_it(cluster, tmp_path):
    cmd = Commands(cluster, tmp_path)
    (tmp_path / "hog.sh").write_text(HOG)
    job_id = cmd.submit("hog.sh")
    wait_for(lambda: (tmp_path / "ready").exists(), 30, message="the job holds its memory")

    def sstat() -> list[str]:
        live = cmd("corral-slurm", "sstat", "-j", f"{job_id}.batch", "-P", "-o", "JobID,MaxRSS,AveCPU,TRESUsageInMax")
        assert live.code == 0 and live.stderr == "", live
        header, row = live.stdout.splitlines()
        assert header == "JobID|MaxRSS|AveCPU|TRESUsageInMax"
        return row.split("|")

    # Sampled every second (--acctg-freq 1): a sample after a second of CPU time shows it.
    wait_for(lambda: sstat()[2] not in ("", "00:00:00"), 30, interval_s=0.5, message="a sample with a second of CPU")
    step, max_rss, ave_cpu, tres = row = sstat()
    assert step == f"{job_id}.batch"
    assert as_bytes(max_rss) >= 100 * MIB, row
    assert ave_cpu.startswith("00:"), row
    assert "gres/gpuutil=73" in tres and "gres/gpumem=2G" in tres, row
    assert cmd("corral-slurm", "sstat", "-n", "-P", "-o", "JobID", "-j", str(job_id)).stdout == ""  # no srun step
    show = cmd("corral", "show", str(job_id))
    fields = {k.strip(): v for k, v in (line.split(" : ", 1) for line in show.stdout.splitlines() if " : " in line)}
    assert float(fields["MemUtilized"].split()[0]) >= 100, show
    assert fields["GpuUtilization"].startswith("73.0% average"), show
    assert cmd("corral", "logs", str(job_id)).stdout == "holding 100 MiB\n"

    (tmp_path / "stop").touch()
    assert cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=60)["state"] == "COMPLETED"
    done = cmd("sacct", "-j", str(job_id), "-P", "-n", "-o", "JobID,MaxRSS,TotalCPU,TRESUsageInMax")
    assert done.code == 0, done
    job_row, batch_row = done.stdout.splitlines()
    assert job_row.split("|")[1] == "" and job_row.split("|")[2] != ""  # the job line: TotalCPU only
    step, max_rss, total_cpu, tres = batch_row.split("|")
    assert step == f"{job_id}.batch" and as_bytes(max_rss) >= 100 * MIB, batch_row
    assert tres.startswith("cpu=00:00:") and "gres/gpuutil=73" in tres and ",mem=" in tres, batch_row
    gone = cmd("corral-slurm", "sstat", "-j", str(job_id))
    assert gone.stderr == f"sstat: error: No steps running for job {job_id}\n", gone


def test_a_job_whose_gpus_stay_idle_is_cancelled_when_the_policy_says_so(make_cluster, tmp_path):
    cluster = make_cluster(0, "gpu_idle_cancel_s = 3\n")
    cmd = Commands(cluster, tmp_path)
    job_id = cmd.submit("--gres=gpu:1", "--wrap", "sleep 60")
    job = cluster.wait_state(job_id, "CANCELLED", timeout_s=30)
    assert job["history"][-1]["event"] == "cancelled" and job["history"][-1]["reason"] == "gpu-idle", job
    assert 3 <= job["end_time"] - job["start_time"] < 20


def test_a_job_whose_gpus_stay_idle_is_flagged_in_the_api_show_and_metrics(make_cluster, tmp_path):
    cluster = make_cluster(0, "gpu_idle_flag_s = 2\n")
    cmd = Commands(cluster, tmp_path)
    job_id = cmd.submit("--gres=gpu:1", "--wrap", "sleep 60")
    wait_for(lambda: cluster.job(job_id)["gpu_idle_flagged"], 30, interval_s=0.5, message="the job flagged idle")
    show = cmd("corral", "show", str(job_id))
    assert "GpuIdle" in show.stdout and "IDLE: its GPUs have stayed under 5% for" in show.stdout, show
    metrics = cluster.http.get("/metrics").text
    assert 'corral_jobs_gpu_idle{account="default",partition="gpu"} 1.0' in metrics, metrics
    assert 'corral_jobs_gpu_idle_gpus{account="default",partition="gpu"} 1.0' in metrics, metrics
    assert 'corral_node_gpus_idle{node="node1"} 1.0' in metrics, metrics
    assert cluster.job(job_id)["state"] == "RUNNING"  # flagged, not cancelled (gpu_idle_cancel_s is 0)
    cmd("scancel", str(job_id))
