"""scancel and scontrol's console scripts against a real controller."""
from __future__ import annotations

import os
import time

import pytest

from tests.e2e.harness import wait_for

from . import golden_records as golden

pytestmark = pytest.mark.slow


def test_scancel_unknown_id_is_silent_success(cmd):
    result = cmd("scancel", "999999")
    assert (result.stdout, result.stderr, result.code) == ("", "", 0)


def test_scancel_running_job_is_cancelled_by_the_caller(cmd, slurm_cluster):
    job_id = cmd.submit("-o", "/dev/null", "--wrap", "sleep 60")
    slurm_cluster.wait_state(job_id, "RUNNING")
    result = cmd("scancel", str(job_id))
    assert (result.stdout, result.stderr, result.code) == ("", "", 0)
    slurm_cluster.wait_state(job_id, "CANCELLED")
    sacct = cmd("sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", str(job_id))
    assert sacct.stdout == f"{job_id}|CANCELLED by {os.getuid()}\n"


def test_scancel_with_a_filter_reports_unknown_ids(cmd):
    fixture = golden.fixture("scancel_unknown_signal")  # the same rule: a filter makes ids strict
    result = cmd("scancel", "-u", "nobody", "999999")
    assert (result.stderr, result.code) == (fixture["stderr"], fixture["exit_code"])


def test_scancel_signal_reaches_the_batch_shell_only_with_b(cmd, slurm_cluster, tmp_path):
    marker = tmp_path / "usr2"
    script = tmp_path / "trap.sh"
    script.write_text(f"#!/bin/sh\ntrap 'echo got >> {marker}' USR2\nwhile true; do sleep 0.1; done\n")
    job_id = cmd.submit("-o", "/dev/null", str(script))
    slurm_cluster.wait_state(job_id, "RUNNING")
    time.sleep(0.5)  # let the shell install its trap
    # submitit's form: the option after the id, the signal name with and without SIG.
    assert cmd("scancel", str(job_id), "--signal", "SIGUSR2").code == 0
    time.sleep(0.5)
    assert not marker.exists(), "without -b, only steps are signaled, and a batch job has none yet"
    assert cmd("scancel", "-b", str(job_id), "--signal", "USR2").code == 0
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.read_text() == "got\n"
    assert slurm_cluster.job(job_id)["state"] == "RUNNING", "a signal is not a cancel"
    cmd("scancel", str(job_id))
    slurm_cluster.wait_state(job_id, "CANCELLED")


def test_scontrol_show_job(cmd, slurm_cluster):
    job_id = cmd.submit("-J", "shown", "-t", "10", "-o", "/dev/null", "--wrap", "sleep 30")
    job = slurm_cluster.wait_state(job_id, "RUNNING")
    lines = cmd("scontrol", "show", "job", str(job_id)).stdout.splitlines()
    assert lines[0] == f"JobId={job_id} JobName=shown"
    assert "   JobState=RUNNING Reason=None Dependency=(null)" in lines
    assert f"   NodeList={job['nodelist']}" in lines
    assert any(line.startswith("   RunTime=") and "TimeLimit=00:10:00" in line for line in lines)
    unknown = cmd("scontrol", "show", "job", "999999")
    assert (unknown.stderr, unknown.code) == ("slurm_load_jobs error: Invalid job id specified\n", 1)
    cmd("scancel", str(job_id))


def test_scontrol_show_reservation(cmd, slurm_cluster):
    """It once answered `invalid entity`; now it reads the controller's reservations."""
    from tests.e2e.harness import API

    start = int(time.time()) + 7200
    created = slurm_cluster.http.post(f"{API}/reservations", json={
        "name": "usergaps-maint", "start": start, "end": start + 3600, "nodes": "node2", "maintenance": True})
    assert created.status_code == 201, created.text
    try:
        result = cmd("scontrol", "show", "reservation", "usergaps-maint")
        assert (result.stderr, result.code) == ("", 0)
        lines = result.stdout.splitlines()
        assert lines[0].startswith("ReservationName=usergaps-maint StartTime=") and lines[0].endswith(
            " Duration=01:00:00")
        assert lines[1].startswith("   Nodes=node2 NodeCnt=1 CoreCnt=") and lines[1].endswith(" Flags=MAINT,SPEC_NODES")
        assert " State=INACTIVE " in lines[3]
    finally:
        slurm_cluster.http.delete(f"{API}/reservations/usergaps-maint")
    assert cmd("scontrol", "show", "reservation").stdout == "No reservations in the system\n"


def test_scontrol_show_hostnames_needs_no_controller(cmd):
    nowhere = {"CORRAL_URL": "http://127.0.0.1:9", "SLURM_NODELIST": "n[1-2]"}
    result = cmd("scontrol", "show", "hostnames", env=nowhere)
    assert (result.stdout, result.code) == ("n1\nn2\n", 0)
    assert cmd("scontrol", "show", "hostnames", "node[1-3]").stdout == "node1\nnode2\nnode3\n"


def test_scontrol_requeue_runs_the_job_again(cmd, slurm_cluster):
    job_id = cmd.submit("-o", "/dev/null", "--wrap", "sleep 60")
    slurm_cluster.wait_state(job_id, "RUNNING")
    result = cmd("scontrol", "requeue", str(job_id))
    assert (result.stdout, result.stderr, result.code) == ("", "", 0)
    wait_for(lambda: slurm_cluster.job(job_id)["restart_count"] == 1, message="requeued")
    slurm_cluster.wait_state(job_id, "RUNNING")
    assert "Restarts=1" in cmd("scontrol", "show", "job", str(job_id)).stdout
    cmd("scancel", str(job_id))


def test_scontrol_hold_and_release(cmd, slurm_cluster):
    blocker = cmd.submit("-o", "/dev/null", "--wrap", "sleep 60")
    waiting = cmd.submit(f"--dependency=afterok:{blocker}", "-o", "/dev/null", "--wrap", "true")
    assert cmd("scontrol", "hold", str(waiting)).code == 0
    assert slurm_cluster.job(waiting)["held"]
    assert "Reason=JobHeldUser" in cmd("scontrol", "show", "job", str(waiting)).stdout
    assert cmd("scontrol", "release", str(waiting)).code == 0
    assert not slurm_cluster.job(waiting)["held"]
    cmd("scancel", str(blocker), str(waiting))


@pytest.mark.parametrize("name", ["action_requeue_unknown", "action_hold_unknown", "action_release_unknown"])
def test_scontrol_actions_on_unknown_ids_print_what_slurm_prints(cmd, name):
    fixture = golden.fixture(name)
    result = cmd(*fixture["argv"])
    assert (result.stdout, result.stderr, result.code) == (fixture["stdout"], fixture["stderr"], fixture["exit_code"])


def test_scontrol_update_changes_a_waiting_job_as_slurm_does(cmd, slurm_cluster):
    job_id = cmd.submit("--hold", "-o", "/dev/null", "--wrap", "true")
    before = slurm_cluster.job(job_id)["priority"]
    result = cmd("scontrol", "update", f"JobId={job_id}", "TimeLimit=10", "Name=renamed", "Comment=hi", "Priority=7")
    assert (result.stdout, result.stderr, result.code) == ("", "", 0)
    job = slurm_cluster.job(job_id)
    assert (job["time_limit_s"], job["name"], job["comment"]) == (600, "renamed", "hi")
    assert job["priority"] == before + 7, "the given priority adds to the multifactor one, as sbatch --priority"
    assert cmd("scontrol", "update", f"job={job_id}", "TimeLimit=+5").code == 0
    assert slurm_cluster.job(job_id)["time_limit_s"] == 900, "+N: minutes added to the current limit"
    # The messages below were recorded from real scontrol 22.05 on this machine.
    assert (cmd("scontrol", "update", "JobId=999999", "TimeLimit=10").stderr
            == "Invalid job id specified for job 999999\n")
    bad = cmd("scontrol", "update", f"JobId={job_id}", "Foo=bar")
    assert (bad.stderr, bad.code) == ("Update of this parameter is not supported: Foo=bar\nRequest aborted\n", 1)
    update = ("scontrol", "update", f"JobId={job_id}")
    assert cmd(*update, "TimeLimit=abc").stderr == "scontrol: error: Invalid TimeLimit value\n"
    assert cmd(*update, "Priority=abc").stderr == "scontrol: error: Invalid Priority value: abc\n"
    cmd("scancel", str(job_id))
    slurm_cluster.wait_state(job_id, "CANCELLED")
    late = cmd("scontrol", "update", f"JobId={job_id}", "TimeLimit=5")
    assert (late.stderr, late.code) == (f"Job has already finished for job {job_id}\n", 1)


def test_scontrol_update_drains_and_resumes_nodes(cmd, slurm_cluster):
    assert cmd("scontrol", "update", "NodeName=node2", "State=DRAIN").stderr == (
        "You must specify a reason when DOWNING or DRAINING a node. Request denied\n")
    assert cmd("scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=maint").code == 0
    assert cmd("sinfo", "-n", "node2", "-h", "-o", "%t %E").stdout.split() in (["drain", "maint"], ["drng", "maint"])
    assert cmd("scontrol", "update", "NodeName=node2", "State=RESUME").code == 0
    assert cmd("sinfo", "-n", "node2", "-h", "-o", "%t").stdout.strip() in ("idle", "mix", "alloc")
