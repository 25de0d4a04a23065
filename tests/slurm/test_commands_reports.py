"""sshare, sreport and sacctmgr against a real controller, after a couple of finished jobs (run through
`corral-slurm`, so the dispatcher is covered too)."""
from __future__ import annotations

import time

import pytest

from corral.slurm.common.tres import allocated_amounts
from corral.slurm.sreport.main import sreport
from corral.slurm.sreport.usage import report_window
from tests.e2e.harness import API, wait_for

pytestmark = pytest.mark.slow

ME = "root"


@pytest.fixture(scope="module")
def finished(slurm_cluster, tmp_path_factory):
    """Accounts lab (1 share) and ml (2), the caller in both; a 2-CPU job in lab and a 1-GPU one in ml."""
    from .commands import Commands

    tenancy = {"accounts": [{"name": "lab"}, {"name": "ml", "shares": 2}],
               "users": [{"name": ME, "accounts": ["lab", "ml"]}], "default_account": "lab",
               "limits": [{"account": "ml", "max_gpus": 2}]}
    assert slurm_cluster.http.put(f"{API}/tenancy", json=tenancy).status_code == 200
    cmd = Commands(slurm_cluster, tmp_path_factory.mktemp("work"))
    jobs = [cmd.submit("-A", "lab", "-c", "2", "-o", "/dev/null", "--wrap", "sleep 2"),
            cmd.submit("-A", "ml", "--gpus=1", "-o", "/dev/null", "--wrap", "sleep 2")]
    return [slurm_cluster.wait_state(job_id, "COMPLETED") for job_id in jobs]


def test_sshare_shows_the_accounts_usage_and_the_callers_rows(cmd, finished):
    def rows() -> dict[str, list[str]]:
        out = cmd("corral-slurm", "sshare", "-P", "-l")
        assert out.code == 0 and out.stderr == "", out
        lines = out.stdout.splitlines()
        assert lines[0] == ("Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|FairShare|"
                            "GrpTRESMins|TRESRunMins")
        return {f"{cells[0]}|{cells[1]}": cells for cells in (line.split("|") for line in lines[1:])}

    wait_for(lambda: int(rows()[" ml|"][4]) > 0, message="ml's GPU usage charged")
    table = rows()
    assert list(table) == ["root|", " lab|", f"  lab|{ME}", " ml|", f"  ml|{ME}"]
    assert table[" lab|"][2:4] == ["1", "0.333333"] and table[" ml|"][2:4] == ["2", "0.666667"]
    assert table[f"  ml|{ME}"][2] == "parent" and table[f"  ml|{ME}"][7] == table[" ml|"][7]
    assert float(table[" ml|"][7]) < 1.0 and table[" lab|"][7] == "1.000000"  # only GPUs are billed
    assert cmd("corral-slurm", "sshare", "-n", "-P", "-u", "nobody", "-o", "acc,user").stdout == "root|\n lab|\n ml|\n"


def test_sreport_sums_the_jobs_allocations_in_the_window(cmd, finished):
    # The reports cover whole hours up to now: read them an hour later, so that this hour is complete.
    hour = time.strftime("%Y-%m-%dT%H:00", time.localtime(finished[0]["start_time"]))
    later = time.time() + 3600
    window = report_window(hour, "now", later)
    expected: dict[str, dict[str, float]] = {}
    for job in finished:
        seconds = min(job["end_time"], window.end) - max(job["start_time"], window.start)
        expected[job["account"]] = {k: v * seconds for k, v in allocated_amounts(job).items()}
    out, err, code = sreport(["-P", "-n", "-t", "seconds", "-T", "cpu,gres/gpu", "cluster", "aubu",
                              f"start={hour}", "end=now"], cmd.env, now=later)
    assert (err, code) == ("", 0)
    cluster = out.split("|", 1)[0]
    lab_cpu, ml_gpu = expected["lab"]["cpu"], expected["ml"]["gres/gpu"]
    assert f"{cluster}|lab|||cpu|{lab_cpu:.0f}\n" in out and f"{cluster}|lab|{ME}|" in out
    assert f"{cluster}|ml|||gres/gpu|{ml_gpu:.0f}\n" in out and f"{cluster}|lab|||gres/gpu|0\n" in out
    banner, _, _ = sreport(["cluster", "utilization", f"start={hour}", "end=now"], cmd.env, now=later)
    cpus = sum(n["cpus"] for n in cmd.cluster.http.get(f"{API}/nodes").json())
    allocated = sum(expected[a]["cpu"] for a in expected) / 60
    # Allocated and Reported (every CPU's time since the cluster began: this module's cluster began moments
    # before its jobs, inside the window's first hour unless an hour struck between), in CPU minutes
    created_at = cmd.cluster.http.get(f"{API}/health").json()["created_at"]
    assert time.time() - 600 < created_at < finished[0]["submit_time"]
    reported = cpus * int(window.end - max(window.start, created_at)) / 60
    assert banner.splitlines()[-1].split() == [cluster, f"{allocated:.0f}", "0", "0", f"{reported - allocated:.0f}",
                                               "0", f"{reported:.0f}"]


def test_sacctmgr_reads_the_tenancy_and_refuses_to_write(cmd, finished):
    out = cmd("corral-slurm", "sacctmgr", "-P", "-n", "show", "assoc", "format=account,user,share,grptres")
    assert out.stdout == f"root||1|\nlab||1|\nlab|{ME}|parent|\nml||2|gres/gpu=2\nml|{ME}|parent|\n"
    refused = cmd("corral-slurm", "sacctmgr", "-i", "add", "account", "physics")
    assert refused.code == 1 and "corral tenancy apply" in refused.stderr and refused.stdout == ""


def test_sshare_run_minutes_of_a_running_job(cmd, slurm_cluster, finished):
    # Last: the job it runs is not one of the finished ones the other tests sum.
    running = cmd.submit("-A", "lab", "-c", "2", "-t", "10", "-o", "/dev/null", "--wrap", "sleep 60")
    slurm_cluster.wait_state(running, "RUNNING")
    out = cmd("corral-slurm", "sshare", "-n", "-P", "-o", "account,user,tresrunmins").stdout.splitlines()
    cmd("scancel", str(running))
    run_mins = {tuple(line.split("|")[:2]): dict(item.split("=") for item in line.split("|")[2].split(","))
                for line in out}
    # 2 CPUs x the minutes left of 10 (the job started seconds ago), on the job's rows and up to the root.
    assert run_mins[(" lab", "")]["cpu"] in ("18", "19") and run_mins[(" lab", "")]["gres/gpu"] == "0"
    assert run_mins[("  lab", ME)] == run_mins[(" lab", "")] == run_mins[("root", "")]
    assert run_mins[(" ml", "")]["cpu"] == "0"
