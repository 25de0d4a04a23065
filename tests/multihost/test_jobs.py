"""Jobs across virtual hosts (tests/multihost): a controller on `head`, agents on `gpu1` and `gpu2`, the
user's commands on `login`, each host in its own network namespace with its own address and name.
What crosses the hosts: the agents' registration and long polls (to `head`), the users' commands (from
`login`), srun's step I/O (the agents connect back to srun, wherever srun runs), MASTER_ADDR and a
torchrun rendezvous between the compute hosts."""
from __future__ import annotations

import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

PYTHON = sys.executable


def test_agents_advertise_the_address_they_reach_the_controller_from(multihost):
    """The agents are given the controller's name only; each registers its own host's address."""
    addresses = {node["name"]: node["address"] for node in multihost.nodes()}
    assert addresses == {name: multihost.net.hosts[name].address for name in ("gpu1", "gpu2")}


def test_a_two_node_job_runs_on_both_hosts_under_their_names(multihost):
    probe = ("import os, socket; other = 'gpu2' if socket.gethostname() == 'gpu1' else 'gpu1'; "
             "print(socket.gethostname(), os.environ['SLURMD_NODENAME'], os.environ['SLURM_NODELIST'], "
             "os.environ['MASTER_ADDR'], os.environ['SLURM_SUBMIT_HOST'], socket.gethostbyname(other))")
    job_id = multihost.sbatch(textwrap.dedent(f"""\
        #!/bin/sh
        #SBATCH -N2 --ntasks-per-node=1 -o two-nodes.out -t 5
        echo "batch on $(hostname)"
        srun -l {PYTHON} -c "{probe}"
        """))
    job = multihost.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=60)
    output = (multihost.root / "two-nodes.out").read_text()
    assert job["state"] == "COMPLETED", output
    gpu1, gpu2 = multihost.net.hosts["gpu1"].address, multihost.net.hosts["gpu2"].address
    # srun ran on gpu1 (the batch host); gpu2's agent connected back to it for its task's output.
    assert sorted(output.splitlines()) == sorted([
        "batch on gpu1",
        f"0: gpu1 gpu1 gpu[1-2] {gpu1} login {gpu2}",
        f"1: gpu2 gpu2 gpu[1-2] {gpu1} login {gpu1}",
    ]), output


def test_srun_on_the_login_host_relays_io_and_exit_codes_of_remote_tasks(multihost):
    """srun listens on `login`; both agents connect back to it across the network: the tasks' output,
    srun's stdin to them (to every task, Slurm's default) and their exit codes cross it."""
    done = multihost.client("srun", "-N2", "--ntasks-per-node=1", "-l", "-t", "2", "sh", "-c",
                            'read line; echo "$(hostname) got $line from $SLURM_SRUN_COMM_HOST"; '
                            'exit $SLURM_NODEID', stdin="hello\n")
    login = multihost.net.hosts["login"].address
    assert sorted(done.stdout.splitlines()) == [f"0: gpu1 got hello from {login}",
                                                f"1: gpu2 got hello from {login}"], done.stderr
    assert done.returncode == 1, done.stderr
    assert "srun: error: gpu2: task 1: Exited with exit code 1" in done.stderr



def test_srun_names_the_address_a_node_could_not_connect_back_to(multihost):
    """gpu2 cannot reach `login` (a prohibit route, as a firewall would): srun says so, with the address
    its agent tried, instead of only `Exited with exit code 1`."""
    from tests.multihost.netns import _ip

    login, gpu2 = multihost.net.hosts["login"].address, multihost.net.hosts["gpu2"].netns
    _ip("route", "add", "prohibit", f"{login}/32", netns=gpu2)
    try:
        done = multihost.client("srun", "-N2", "--ntasks-per-node=1", "-t", "2", "true")
    finally:
        _ip("route", "del", "prohibit", f"{login}/32", netns=gpu2)
    assert done.returncode == 1, done.stderr
    assert f"srun: error: gpu2: task 1: cannot connect to srun at {login}:" in done.stderr
    assert f"srun: error: the nodes' agents must reach this host at {login}:" in done.stderr
    assert "gpu1" not in done.stderr, "gpu1 reached srun and its task succeeded"


TORCH_SCRIPT = """\
import os, socket
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.tensor(float(dist.get_rank() + 1))
dist.all_reduce(value)
print(f"rank {dist.get_rank()}/{dist.get_world_size()} on {socket.gethostname()} sum {int(value.item())}",
      flush=True)
dist.destroy_process_group()
"""


def test_torchrun_rendezvous_across_two_hosts_at_master_addr(multihost):
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("torch is not installed in this environment: no torchrun rendezvous to test")
    (multihost.root / "ddp.py").write_text(TORCH_SCRIPT)
    job_id = multihost.sbatch(textwrap.dedent(f"""\
        #!/bin/sh
        #SBATCH -N2 --ntasks-per-node=1 -o torchrun.out -t 5
        srun -l sh -c '{PYTHON} -m torch.distributed.run --nnodes=2 --nproc-per-node=1 \\
          --rdzv-id=$SLURM_JOB_ID --rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT ddp.py'
        """))
    job = multihost.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=180)
    output = (multihost.root / "torchrun.out").read_text()
    assert job["state"] == "COMPLETED", f"{output}\n{multihost.logs()}"
    results = sorted(line.split(": ", 1)[1] for line in output.splitlines() if ": rank " in line)
    assert [r.split()[-1] for r in results] == ["3", "3"], output  # 1 + 2, on both ranks
    assert {r.split()[3] for r in results} == {"gpu1", "gpu2"}, output
