"""How the commands turn the controller's refusals into Slurm's messages: scontrol's job actions
against outputs recorded from real Slurm 22.05 (record_golden_more.py), sbatch's submission
refusals, and what scancel refuses to do. The controller is a stand-in that answers as corral's
does (corral.engine.engine's rules, corral.controller.app's statuses and details)."""
from __future__ import annotations

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.http import ApiError
from corral.slurm.sbatch.main import refusal
from corral.slurm.scancel.main import check_supported
from corral.slurm.scancel.opts import parse_scancel
from corral.slurm.scontrol.actions import job_actions
from corral.slurm.scontrol.opts import parse_scontrol

from . import golden_records as golden

# Where corral's answer differs from Slurm's on purpose, what corral prints instead.
CORRAL_DIFFERS = {
    # Slurm accepts a hold on a running job (it zeroes the priority); corral holds pending jobs only.
    "action_hold_running": ("", "Job is no longer pending execution for job {filler}\n"
                                "slurm_suspend error: Job is no longer pending execution\n", 1),
}


class CorralLikeController:
    """Answers requeue/hold/release as corral's controller does for the recorded jobs."""

    def __init__(self, roles: dict[str, int]) -> None:
        self.jobs = {
            roles.get("filler"): {"state": "RUNNING", "requeue": True},
            roles.get("held"): {"state": "PENDING", "requeue": True},
            roles.get("norequeue"): {"state": "RUNNING", "requeue": False},
            roles.get("done"): {"state": "COMPLETED", "requeue": True},
            roles.get("allocation"): {"state": "RUNNING", "requeue": True, "allocation": True},
        }
        self.jobs.pop(None, None)

    def job(self, job_id: int) -> dict:
        if job_id not in self.jobs:
            raise ApiError(404, f"invalid job id specified: {job_id}")
        return {"id": job_id, "array_job_id": None, **self.jobs[job_id]}

    def act(self, job_id: int, action: str, uid: int | None = None) -> dict:
        job = self.job(job_id)
        if job["state"] == "COMPLETED":
            raise ApiError(409, f"job {job_id} already finished (COMPLETED)")
        if action == "requeue" and job.get("allocation"):  # engine/user_requests.py's refusal
            raise ApiError(409, f"job {job_id} is an interactive allocation (salloc, or srun outside a job), whose "
                                "holder would not come back to it: only batch jobs can be requeued")
        if action == "requeue" and not job["requeue"]:
            raise ApiError(409, f"job {job_id} was submitted with --no-requeue")
        if action == "requeue" and job["state"] != "RUNNING":
            raise ApiError(409, f"job {job_id} is {job['state']}: only a running job can be requeued")
        if action in ("hold", "release") and job["state"] != "PENDING":
            raise ApiError(409, f"job {job_id} is {job['state']}: only a pending job can be held or released")
        return job


@pytest.mark.parametrize("name", [n for n in golden.fixture_names() if n.startswith("action_")])
def test_scontrol_job_actions_match_real_slurm(name):
    fixture = golden.fixture(name)
    controller = CorralLikeController(fixture["roles"])
    result = job_actions(parse_scontrol(fixture["argv"][1:]), controller)
    expected = (fixture["stdout"], fixture["stderr"], fixture["exit_code"])
    if name in CORRAL_DIFFERS:
        out, err, code = CORRAL_DIFFERS[name]
        expected = (out, err.format(**fixture["roles"]), code)
    assert result == expected


@pytest.mark.parametrize(("detail", "stderr"), [
    ("requested time limit 7200s exceeds the maximum 3600s of partition 'gpu'",
     "sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)\n"
     "sbatch: error: (requested time limit 7200s exceeds the maximum 3600s of partition 'gpu')\n"),
    ("--gpus=3 does not split evenly over 2 nodes",
     "sbatch: error: Batch job submission failed: --gpus=3 does not split evenly over 2 nodes\n"),
])
def test_sbatch_refusals_read_as_slurmctlds(detail, stderr):
    error = refusal(detail, {"partition": "gpu"})
    assert (error.stderr, error.exit_code) == (stderr, 1)


def test_sbatch_unknown_partition_is_slurms_two_lines():
    fixture = golden.fixture("sbatch_invalid_partition")
    error = refusal("invalid partition name specified: 'nosuch' (partitions: gpu)", {"partition": "nosuch"})
    assert (error.stderr, error.exit_code) == (fixture["stderr"], fixture["exit_code"])


@pytest.mark.parametrize(("argv", "named"), [(["12.0"], "12.0"), (["12.1", "--signal", "USR2"], "12.1")])
def test_scancel_refuses_what_the_api_cannot_do(argv, named):
    with pytest.raises(SlurmCommandError) as caught:
        check_supported(parse_scancel(argv, {}))
    assert named in caught.value.stderr and caught.value.exit_code == 1


def test_scancel_signal_is_supported():
    check_supported(parse_scancel(["12", "--signal", "USR2"], {}))  # POST /jobs/{id}/signal


def test_scancel_batch_step_cancels_the_job():
    check_supported(parse_scancel(["12.batch"], {}))  # the batch shell is the job: no error


class _History:
    """A controller holding one job that finished `ended_s_ago` seconds before NOW."""

    NOW = 1_800_000_000.0

    def __init__(self, ended_s_ago: float) -> None:
        self.record = {"id": 5, "state": "COMPLETED", "end_time": self.NOW - ended_s_ago, "array_job_id": None}

    def jobs(self, **_):
        return []

    def job_columns(self, path: str, params: dict, fields: tuple[str, ...]):
        from corral.slurm.common.table import JobColumns

        return JobColumns(fields, [[] for _ in fields])  # none unfinished

    def job(self, job_id: int) -> dict:
        if job_id != 5:
            raise ApiError(404, f"invalid job id specified: {job_id}")
        return self.record


@pytest.mark.parametrize(("ended_s_ago", "known"), [(10, True), (299, True), (400, False)])
def test_squeue_forgets_finished_jobs_after_min_job_age(ended_s_ago, known):
    from corral.slurm.squeue.main import fetch_jobs
    from corral.slurm.squeue.opts import parse_squeue

    jobs = fetch_jobs(_History(ended_s_ago), parse_squeue(["-j", "5"], {}), _History.NOW)
    assert [j["id"] for j in jobs] == ([5] if known else [])
