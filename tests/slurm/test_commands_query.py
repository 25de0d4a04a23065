"""squeue, sacct, sinfo and sprio's console scripts against a real controller."""
from __future__ import annotations

import os

import pytest

from tests.e2e.harness import wait_for

pytestmark = pytest.mark.slow

SQUEUE_HEADER = "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"


def rows_of(stdout: str, job_ids) -> list[str]:
    wanted = {str(i) for i in job_ids}
    return [line for line in stdout.splitlines() if line.split() and line.split()[0] in wanted]


def test_squeue_default_layout_lists_running_and_pending_jobs(cmd, slurm_cluster):
    running = cmd.submit("-J", "runner", "-o", "/dev/null", "--wrap", "sleep 30")
    slurm_cluster.wait_state(running, "RUNNING")
    held = cmd.submit("-H", "-J", "held", "-o", "/dev/null", "--wrap", "true")
    result = cmd("squeue")
    assert result.code == 0 and result.stderr == "" and result.stdout.startswith(SQUEUE_HEADER)
    rows = {line.split()[0]: line for line in rows_of(result.stdout, (running, held))}
    user = slurm_cluster.job(running)["user"][:8]
    assert rows[str(running)].split()[1:5] == ["gpu", "runner", user, "R"]
    assert rows[str(held)] == f"{held:>18} {'gpu':>9} {'held':>8} {user:>8} PD       0:00      1 (JobHeldUser)"
    cmd("scancel", str(running), str(held))


def test_squeue_noheader_format_and_finished_jobs(cmd, slurm_cluster):
    done = cmd.submit("-o", "/dev/null", "--wrap", "true")
    slurm_cluster.wait_state(done, "COMPLETED")
    assert cmd("squeue", "-h", "-o", "%i %T", "-j", str(done)).stdout == "", "finished: not listed by default"
    result = cmd("squeue", "-h", "-o", "%i %T %j", "-t", "all", "--jobs", str(done))
    assert (result.stdout, result.stderr, result.code) == (f"{done} COMPLETED wrap\n", "", 0)
    assert f"{done} COMPLETED" in cmd("squeue", "-h", "-o", "%i %T", "-t", "all").stdout


def test_squeue_one_unknown_job_id_is_slurms_error(cmd):
    result = cmd("squeue", "--jobs", "999999")
    assert (result.stdout, result.stderr, result.code) == ("", "slurm_load_jobs error: Invalid job id specified\n", 1)


def test_sacct_as_submitit_runs_it(cmd, slurm_cluster):
    first = cmd.submit("-o", "/dev/null", "--wrap", "true")
    second = cmd.submit("-o", "/dev/null", "--wrap", "exit 2")
    first_job = slurm_cluster.wait_state(first, "COMPLETED")
    second_job = slurm_cluster.wait_state(second, "FAILED")
    result = cmd("sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", str(second), "-j", str(first))
    assert result.code == 0 and result.stderr == ""
    assert result.stdout == (
        "JobID|State|NodeList\n"
        f"{first}|COMPLETED|{first_job['nodelist']}\n{first}.batch|COMPLETED|{first_job['nodelist']}\n"
        f"{second}|FAILED|{second_job['nodelist']}\n{second}.batch|FAILED|{second_job['nodelist']}\n")


def test_sacct_array_by_its_id(cmd, slurm_cluster):
    array = cmd.submit("--array=0-2", "-o", "/dev/null", "--wrap", "true")
    wait_for(lambda: cmd("sacct", "-X", "-n", "-P", "-o", "State", "-j", str(array)).stdout
             == "COMPLETED\n" * 3, message="array done")
    result = cmd("sacct", "-X", "-P", "-o", "JobID", "-j", f"{array}_1,{array}")
    assert result.stdout == f"JobID\n{array}_0\n{array}_1\n{array}_2\n"


def test_sacct_default_is_todays_jobs_of_the_caller(cmd, slurm_cluster):
    job_id = cmd.submit("-o", "/dev/null", "--wrap", "true")
    slurm_cluster.wait_state(job_id, "COMPLETED")
    result = cmd("sacct", "-X", "-n", "-P", "-o", "JobID,State")
    assert result.code == 0 and f"{job_id}|COMPLETED\n" in result.stdout
    assert cmd("sacct", "-X", "-n", "-P", "-o", "JobID", "-u", "nobody-else").stdout == ""


def test_sinfo_default(cmd):
    result = cmd("sinfo")
    assert result.code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"
    assert all(line.startswith("gpu*         up   infinite      ") for line in lines[1:])
    assert sum(int(line.split()[3]) for line in lines[1:]) == 2


def test_sprio_lists_pending_jobs_with_the_weighted_factors(cmd, slurm_cluster):
    blocker = cmd.submit("-N2", "--gres=gpu:4", "-o", "/dev/null", "--wrap", "sleep 30")
    slurm_cluster.wait_state(blocker, "RUNNING")
    waiting = cmd.submit("--gres=gpu:1", "-o", "/dev/null", "--wrap", "true")
    wait_for(lambda: str(waiting) in cmd("sprio", "-h", "-o", "%i").stdout, message="priorities computed")
    result = cmd("sprio", "-j", str(waiting))
    lines = result.stdout.splitlines()
    assert lines[0] == "          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE"
    assert lines[1].split()[:2] == [str(waiting), "gpu"] and len(lines) == 2
    assert cmd("sprio", "-w").stdout.splitlines()[1].split() == ["Weights", "1", "1000", "10000"]
    assert cmd("sprio", "-j", str(blocker)).stdout == "Unable to find jobs matching user/id(s) specified\n"
    cmd("scancel", str(blocker), str(waiting))


def test_dispatcher_runs_the_named_command(cmd):
    result = cmd("corral-slurm", "sinfo", "-h", "-o", "%P %D")
    assert (result.stdout, result.code) == ("gpu* 2\n", 0)
    assert cmd("corral-slurm", "bogus").code == 1
    assert os.path.basename(cmd("corral-slurm", "squeue", "--version").stdout.split()[0]) == "slurm"


def test_sstat_takes_an_array_task_id(cmd, slurm_cluster):
    """`sstat -j A_I` answered `Invalid job id`; now it shows that task's running steps."""
    array = cmd.submit("--array=0-1", "-o", "/dev/null", "--wrap", "sleep 30")

    def running_tasks() -> str:
        return cmd("squeue", "-h", "-t", "R", "-o", "%i", "-j", str(array)).stdout

    wait_for(lambda: running_tasks().split() == [f"{array}_0", f"{array}_1"], message="both tasks running")
    result = cmd("corral-slurm", "sstat", "-a", "-n", "-P", "-o", "JobID,NTasks", "-j", f"{array}_1")
    assert (result.stdout, result.stderr, result.code) == (f"{array}_1.batch|1\n", "", 0)
    step = cmd("corral-slurm", "sstat", "-n", "-P", "-o", "JobID", "-j", f"{array}_0.batch")
    assert (step.stdout, step.stderr) == (f"{array}_0.batch\n", "")
    missing = cmd("corral-slurm", "sstat", "-j", f"{array}_7")
    assert missing.stderr == f"sstat: error: couldn't get steps for job {array}_7\n"
    cmd("scancel", str(array))
