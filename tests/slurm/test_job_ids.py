"""Job ids in the Slurm commands, against the real controller (tests/controller/live.py, called in
process): each form names the jobs Slurm would, and what is no id is refused before anything is done.
Python's int() and str.isdigit() take other scripts' digits (int("\u0661\u0665") == 15), and squeue's
strtol emulation read `12_[1-3]` as task 0 and `15abc` as 15."""
from __future__ import annotations

import io

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sacct.main import sacct
from corral.slurm.sbatch.main import sbatch
from corral.slurm.scancel.main import scancel
from corral.slurm.scontrol.main import scontrol
from corral.slurm.squeue.main import squeue
from tests.controller.live import SECRET, live_controller

ARABIC_15 = "\u0661\u0665"


@pytest.fixture
def live(tmp_path):
    """Array 1 (tasks 0-9: ids 1-10), then plain jobs 11 to 15."""
    with live_controller(tmp_path) as controller:
        assert controller.submit(array="0-9")["task_ids"] == list(range(1, 11))
        assert [controller.submit()["job_id"] for _ in range(5)] == [11, 12, 13, 14, 15]
        controller.env = {"CORRAL_URL": controller.url, "CORRAL_SECRET": SECRET, "USER": "alice",
                          "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")}
        yield controller


def run(command, live, *argv):
    try:
        return command(list(argv), live.env)
    except SlurmCommandError as exc:
        return exc.stdout, exc.stderr, exc.exit_code


def cancelled(live) -> list[int]:
    return sorted(i for i, state in live.states().items() if state == "CANCELLED")


def held(live) -> list[int]:
    return [i for i in range(1, 16) if live.job(i)["held"]]


def test_scancel_forms(live):
    assert run(scancel, live, "1_5") == ("", "", 0)
    assert cancelled(live) == [6]
    assert run(scancel, live, "1_[2-3],1_8") == ("", "", 0)
    assert cancelled(live) == [3, 4, 6, 9]
    assert run(scancel, live, "1") == ("", "", 0)
    assert cancelled(live) == list(range(1, 11))
    assert live.job(15)["state"] == "PENDING"


def test_scancel_refuses_other_scripts_digits(live):
    assert run(scancel, live, "12", ARABIC_15) == ("", f"scancel: error: Invalid job id {ARABIC_15}\n", 1)
    assert cancelled(live) == []


def test_scontrol_hold_and_release_forms(live):
    assert run(scontrol, live, "hold", "1_5,1_[0-1]") == ("", "", 0)
    assert held(live) == [1, 2, 6]
    assert run(scontrol, live, "release", "1") == ("", "", 0)
    assert held(live) == []
    out, err, code = run(scontrol, live, "hold", ARABIC_15, "1_5_3", "3_1")
    assert (err, code) == (f"Invalid job id specified for job {ARABIC_15}\nInvalid job id specified for job 1_5_3\n"
                           "Invalid job id specified for job 3_1\nslurm_suspend error: Invalid job id specified\n", 1)
    assert held(live) == []


def test_scontrol_update_takes_task_lists(live):
    assert run(scontrol, live, "update", "JobId=1_[1-2]", "Comment=x") == ("", "", 0)
    assert [i for i in range(1, 16) if live.job(i).get("comment") == "x"] == [2, 3]


def test_scontrol_show_job_an_array_task(live):
    out, _, code = run(scontrol, live, "show", "job", "1_9")
    assert code == 0 and out.startswith("JobId=10 ArrayJobId=1 ArrayTaskId=9 ")
    assert run(scontrol, live, "show", "job", ARABIC_15)[1:] == ("slurm_load_jobs error: Invalid job id specified\n", 1)


def test_sacct_task_lists_select_those_tasks(live):
    out, _, code = run(sacct, live, "-X", "-n", "-P", "-o", "JobID", "-j", "1_[2-3,7],15")
    assert (out, code) == ("1_[2-3,7]\n15\n", 0)  # pending tasks share a line, as in sacct


def test_squeue_task_lists_and_strict_ids(live):
    out, _, code = run(squeue, live, "-h", "-r", "-o", "%i", "-j", "1_[2-3]")
    assert (out, code) == ("1_2\n1_3\n", 0)
    assert run(squeue, live, "-h", "-j", "15abc") == ("", "squeue: error: Invalid job id: 15abc\n", 1)


def test_sbatch_dependency_refuses_other_scripts_digits(live, tmp_path):
    out, err, code = run(lambda argv, env: sbatch(argv, env, io.StringIO()), live,
                         f"--dependency=afterok:{ARABIC_15}", "-D", str(tmp_path), "--wrap", "true")
    assert (out, err, code) == ("", "sbatch: error: Batch job submission failed: Job dependency problem\n", 1)
    assert max(live.states()) == 15  # nothing submitted
