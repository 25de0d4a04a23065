"""Real Slurm clients, installed from PyPI, driving corral unchanged: submitit (a 2-node x 2-task job, a
5-task array, a cancel, a requeue on its preemption signal), PyTorch Lightning's SLURM environment under
srun (ranks and world size from the environment, a CPU all-reduce), and torchrun launched by srun with its
rendezvous endpoint taken from `scontrol show hostnames`.

The clients find sbatch, srun, squeue, sacct, scancel and scontrol on PATH: the tests put a directory of
corral's commands first, as the agent does for jobs."""
from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from corral.slurm.common.commands_dir import first_on_path, slurm_commands_dir

pytestmark = pytest.mark.slow
submitit = pytest.importorskip("submitit")


@pytest.fixture
def client_env(slurm_cluster, tmp_path, monkeypatch):
    """This process's environment as a user's shell on the cluster would have it."""
    for name in list(os.environ):
        if name.startswith(("SLURM_", "SBATCH_", "SRUN_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CORRAL_URL", slurm_cluster.url)
    monkeypatch.setenv("CORRAL_SECRET_FILE", str(slurm_cluster.secret_file))
    monkeypatch.setenv("PATH", first_on_path(slurm_commands_dir(tmp_path / "cmds"), os.environ.get("PATH", "")))
    return tmp_path


def executor(folder: Path, **parameters):
    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=2)
    ex.update_parameters(time=5, **parameters)
    return ex


def global_rank() -> tuple[int, int, int, str]:
    env = submitit.JobEnvironment()
    return env.global_rank, env.num_tasks, env.num_nodes, env.hostname


def square(x: int) -> int:
    return x * x


def sleep_long() -> None:
    time.sleep(300)


class Resumable(submitit.helpers.Checkpointable):
    """Waits to be preempted on its first run; returns the restart count on the next."""

    def __call__(self, marker: str) -> int:
        restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        if restarts == 0:
            Path(marker).write_text("running")
            time.sleep(300)
        return restarts


def test_submitit_two_nodes_two_tasks_each(client_env, slurm_cluster):
    job = executor(client_env / "multi", nodes=2, ntasks_per_node=2).submit(global_rank)
    results = job.results()
    assert sorted(r[0] for r in results) == [0, 1, 2, 3]
    assert {r[1:3] for r in results} == {(4, 2)}
    slurm_cluster.wait_state(int(job.job_id), "COMPLETED")  # the results come before the job's end
    assert job.watcher.get_state(job.job_id, mode="force") == "COMPLETED", "submitit reads sacct"


def test_submitit_array_of_five(client_env):
    ex = executor(client_env / "array", array_parallelism=3)
    jobs = ex.map_array(square, range(5))
    assert [j.result() for j in jobs] == [0, 1, 4, 9, 16]
    assert len({j.job_id.split("_")[0] for j in jobs}) == 1 and jobs[4].job_id.endswith("_4")


def test_submitit_cancel(client_env, slurm_cluster):
    job = executor(client_env / "cancel").submit(sleep_long)
    deadline = time.monotonic() + 30
    while slurm_cluster.job(int(job.job_id))["state"] != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    job.cancel()
    slurm_cluster.wait_state(int(job.job_id), "CANCELLED")
    assert job.watcher.get_state(job.job_id, mode="force") == f"CANCELLED by {os.getuid()}", "as sacct prints it"


def test_submitit_requeue_on_its_preemption_signal(client_env, slurm_cluster):
    marker = client_env / "marker"
    job = executor(client_env / "requeue", signal_delay_s=30).submit(Resumable(), str(marker))
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.2)
    job._interrupt()  # scancel --signal SIGTERM, then USR2: submitit checkpoints and runs scontrol requeue
    assert job.result() == 1, "the requeued job ran again with SLURM_RESTART_COUNT=1"
    record = slurm_cluster.wait_state(int(job.job_id), "COMPLETED")
    assert record["restart_count"] == 1 and record["state"] == "COMPLETED"


LIGHTNING_SCRIPT = """
import torch
from lightning.fabric import Fabric
from lightning.fabric.plugins.environments import SLURMEnvironment

assert SLURMEnvironment.detect(), "Lightning must see a SLURM job"
fabric = Fabric(accelerator="cpu", devices=2, num_nodes=1, strategy="ddp")
fabric.launch()
env = fabric._connector.cluster_environment
total = fabric.all_reduce(torch.tensor(float(fabric.global_rank + 1)), reduce_op="sum")
print(f"{type(env).__name__} {fabric.global_rank} {fabric.world_size} {fabric.local_rank} {fabric.node_rank} "
      f"{int(total.item())}", flush=True)
# Left to interpreter exit, gloo's threads can be torn down mid-flight: one CI run had a rank die of
# SIGABRT ("terminate called without an active exception") after printing its line.
torch.distributed.destroy_process_group()
"""


def test_lightning_detects_slurm_under_srun_and_reduces_on_cpu(client_env, cmd, slurm_cluster):
    pytest.importorskip("lightning")
    script = client_env / "fabric_run.py"
    script.write_text(LIGHTNING_SCRIPT)
    batch = client_env / "lightning.sh"
    batch.write_text(f"#!/bin/bash\n#SBATCH -N1 --ntasks-per-node=2 -o lightning.out -t 5\n"
                     f"srun -l {sys.executable} {script}\n")  # -l: whole lines, whatever the interleaving
    job_id = cmd.submit(str(batch))
    job = slurm_cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=120)
    output = (client_env / "lightning.out").read_text()
    assert job["state"] == "COMPLETED", output
    lines = sorted(line for line in output.splitlines() if "SLURMEnvironment" in line)
    assert lines == ["0: SLURMEnvironment 0 2 0 0 3", "1: SLURMEnvironment 1 2 1 0 3"], output


TORCH_SCRIPT = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.tensor(float(dist.get_rank()))
dist.all_reduce(value)
# One write(2) per line: torchrun's two children share their task's stdout pipe, and print()'s
# separate writes of the text and the newline interleave between them.
os.write(1, f"rank {dist.get_rank()}/{dist.get_world_size()} node {os.environ['SLURM_NODEID']} "
            f"sum {int(value.item())}\\n".encode())
dist.destroy_process_group()
"""


def test_srun_torchrun_with_the_rendezvous_from_scontrol_hostnames(client_env, cmd, slurm_cluster):
    try:
        socket.gethostbyname("node1")
    except OSError:
        pytest.skip("the test cluster's node names do not resolve here (add '127.0.0.1 node1 node2' to "
                    "/etc/hosts, as .ci/run does)")
    script = client_env / "ddp.py"
    script.write_text(TORCH_SCRIPT)
    port = 29500 + os.getpid() % 1000
    batch = client_env / "torchrun.sh"
    batch.write_text(f"""#!/bin/bash
#SBATCH -N2 --ntasks-per-node=1 -o torchrun.out -t 5
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun -l --ntasks-per-node=1 {Path(sys.executable).parent}/torchrun --nnodes=$SLURM_NNODES --nproc-per-node=2 \\
  --node-rank=$SLURM_NODEID --rdzv-id=$SLURM_JOB_ID --rdzv-backend=c10d --rdzv-endpoint=$head:{port} {script}
""")
    job_id = cmd.submit(str(batch))
    job = slurm_cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=180)
    output = (client_env / "torchrun.out").read_text()
    assert job["state"] == "COMPLETED", output
    # "<srun task>: rank R/4 node N sum 6": the c10d rendezvous numbers the ranks in its own order.
    ranks = sorted(line.split(": ", 1)[1] for line in output.splitlines() if ": rank " in line)
    assert sorted(int(r.split()[1].split("/")[0]) for r in ranks) == [0, 1, 2, 3], output
    assert {r.split(" ", 2)[2] for r in ranks} == {"node 0 sum 6", "node 1 sum 6"}, output
    assert sum(r.endswith("node 0 sum 6") for r in ranks) == 2, "two processes on each node"
