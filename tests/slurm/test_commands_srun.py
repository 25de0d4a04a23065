"""srun and salloc against a real controller and agents: steps inside batch jobs and allocations, output
and stdin relayed, exit codes, signals, and step accounting (texts as real srun 22.05 prints them)."""
from __future__ import annotations

import re
import time

import pytest

pytestmark = pytest.mark.slow


def test_srun_outside_a_job_allocates_runs_and_gives_back(cmd, slurm_cluster):
    result = cmd("srun", "-N2", "-l", "sh", "-c", "echo $SLURM_PROCID/$SLURM_NTASKS on $SLURMD_NODENAME")
    assert result.code == 0, result
    assert sorted(result.stdout.splitlines()) == ["0: 0/2 on node1", "1: 1/2 on node2"]
    job = next(j for j in slurm_cluster.http.get("/api/v1/jobs?all=true").json() if j["name"] == "sh")
    job = slurm_cluster.wait_state(job["id"], "COMPLETED")
    assert [(s["step_id"], s["state"], s["num_tasks"]) for s in job["steps"]] == [("0", "COMPLETED", 2)]


def test_exit_codes_and_signal_deaths_as_srun_reports_them(cmd):
    result = cmd("srun", "-n2", "sh", "-c", "exit 3")
    assert result.code == 3
    assert re.fullmatch(r"srun: error: node\d: tasks 0-1: Exited with exit code 3\n", result.stderr), result
    killed = cmd("srun", "-n1", "sh", "-c", "kill -9 $$")
    assert killed.code == 137
    assert re.match(r"srun: error: node\d: task 0: Killed\nsrun: Force Terminated StepId=\d+\.0\n$", killed.stderr)


def test_stdin_reaches_every_task(cmd):
    result = cmd("srun", "-n2", "cat", stdin="hi\n")
    assert (result.code, result.stdout) == (0, "hi\nhi\n"), result


def test_steps_inside_a_batch_job(cmd, slurm_cluster, tmp_path):
    script = tmp_path / "steps.sh"
    script.write_text("""#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2 -o out.txt
srun -l bash -c 'echo $SLURM_NTASKS $SLURM_NTASKS_PER_NODE $SLURM_NNODES $SLURM_STEP_ID $SLURM_NODEID' | sort
for host in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  srun --nodes=1 --ntasks=1 -w "$host" sh -c 'sleep 1; echo on $SLURMD_NODENAME' &
done
wait
srun -N1 -n1 -w node9 true; echo "rc=$?"
""")
    job_id = cmd.submit(str(script))
    job = slurm_cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=60)
    output = (tmp_path / "out.txt").read_text()
    assert job["state"] == "COMPLETED", output
    lines = output.splitlines()
    assert lines[:4] == ["0: 4 2 2 0 0", "1: 4 2 2 0 0", "2: 4 2 2 0 1", "3: 4 2 2 0 1"], output
    assert sorted(lines[4:6]) == ["on node1", "on node2"], "backgrounded steps, one per node"
    assert "rc=1" in lines
    steps = [(s["step_id"], s["state"], s["nodelist"]) for s in job["steps"]]
    assert steps[0] == ("batch", "COMPLETED", "node1")
    assert steps[1] == ("0", "COMPLETED", "node[1-2]")
    assert sorted(steps[2:]) == [("1", "COMPLETED", "node1"), ("2", "COMPLETED", "node2")] or \
        sorted(steps[2:]) == [("1", "COMPLETED", "node2"), ("2", "COMPLETED", "node1")]
    sacct = cmd("sacct", "-j", str(job_id), "-P", "-n", "-o", "JobID,JobName,State,NNodes,NTasks")
    assert sacct.stdout.splitlines()[:3] == [f"{job_id}|steps.sh|COMPLETED|2|",  # no NTasks: as real sacct
                                             f"{job_id}.batch|batch|COMPLETED|1|1", f"{job_id}.0|bash|COMPLETED|2|4"]


def test_scancel_signal_reaches_the_step_not_the_batch_shell(cmd, slurm_cluster, tmp_path):
    script = tmp_path / "trap.sh"
    script.write_text("""#!/bin/bash
#SBATCH -o trap.txt
trap 'echo batch got USR2' USR2
srun python3 -c "
import signal, sys, time
signal.signal(signal.SIGUSR2, lambda *_: (print('step got USR2', flush=True), sys.exit(0)))
print('ready', flush=True)
while True:
    time.sleep(0.1)
"
echo "step ended"
""")
    job_id = cmd.submit(str(script))
    out = tmp_path / "trap.txt"
    deadline = time.monotonic() + 30
    while "ready" not in (out.read_text() if out.exists() else ""):
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(0.1)
    assert cmd("scancel", "--signal=USR2", str(job_id)).code == 0
    slurm_cluster.wait_state(job_id, "COMPLETED", timeout_s=30)
    assert out.read_text().splitlines() == ["ready", "step got USR2", "step ended"]


def test_salloc_runs_a_command_inside_an_allocation(cmd, slurm_cluster):
    result = cmd("salloc", "-N2", "sh", "-c", "echo $SLURM_JOB_NUM_NODES $SLURM_JOB_NODELIST; srun -l hostname | wc -l")
    assert result.code == 0, result
    assert result.stdout.splitlines() == ["2 node[1-2]", "2"]
    job_id = int(re.match(r"salloc: Granted job allocation (\d+)\n", result.stderr).group(1))
    assert result.stderr.endswith(f"salloc: Relinquishing job allocation {job_id}\n")
    job = slurm_cluster.wait_state(job_id, "COMPLETED")
    assert job["name"] == "interactive" and [s["step_id"] for s in job["steps"]] == ["0"]


def test_salloc_exit_status_is_the_commands(cmd, slurm_cluster):
    result = cmd("salloc", "-N1", "sh", "-c", "exit 3")
    assert result.code == 3
    job_id = int(re.match(r"salloc: Granted job allocation (\d+)\n", result.stderr).group(1))
    assert slurm_cluster.wait_state(job_id, "FAILED")["exit_code"] == 3


def test_step_outside_the_allocation_is_refused_as_slurm_does(cmd, slurm_cluster):
    result = cmd("salloc", "-N1", "srun", "-w", "node9", "true")
    assert "srun: error: Unable to create step for job" in result.stderr
    assert "Requested node configuration is not available" in result.stderr and result.code == 1


def test_squeue_steps_lists_running_steps_as_slurm_does(cmd, slurm_cluster, tmp_path):
    script = tmp_path / "long.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N2 -o /dev/null\nsrun sleep 30\n")
    job_id = cmd.submit(str(script))
    deadline = time.monotonic() + 30
    while not any(s["step_id"] == "0" for s in slurm_cluster.job(job_id)["steps"]):
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(0.2)
    result = cmd("squeue", "-s")
    lines = result.stdout.splitlines()
    # The header as real squeue -s prints it (22.05, recorded on this machine).
    assert lines[0] == "         STEPID     NAME PARTITION     USER      TIME NODELIST"
    assert [line.split()[:2] + line.split()[-1:] for line in lines[1:]] == [
        [f"{job_id}.0", "sleep", "node[1-2]"], [f"{job_id}.batch", "batch", "node1"]]
    only = cmd("squeue", f"--steps={job_id}.0", "-h", "-o", "%i %j %N")
    assert only.stdout == f"{job_id}.0 sleep node[1-2]\n"
    cmd("scancel", str(job_id))


def test_srun_without_a_command_and_with_nodes_for_a_new_allocation(cmd):
    bare = cmd("srun")
    assert (bare.stderr, bare.code) == ("srun: fatal: No command given to execute.\n", 1)  # as real srun
    pinned = cmd("srun", "-w", "node2", "printenv", "SLURMD_NODENAME")
    assert (pinned.code, pinned.stdout) == (0, "node2\n"), pinned
    unknown = cmd("srun", "-w", "node9", "true")
    assert unknown.code == 1 and "Invalid node name specified: node9" in unknown.stderr, unknown
