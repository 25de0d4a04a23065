"""The sampled usage as sacct and sstat print it (slurm/common/usage.py, sstat/), from records built by hand."""
from __future__ import annotations

import pytest

from corral.jobref import parse_job_ref
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.usage import cpu_time, num_unit
from corral.slurm.sacct.fields import AcctView
from corral.slurm.sacct.format import Layout, parse_fields, render
from corral.slurm.sstat.opts import parse_sstat
from corral.slurm.sstat.output import running_rows, sstat_output

from .builders import T0, job, running

USAGE = {"nodes": 1, "samples": 3, "interval_s": 30.0, "rss_kib": 100_000, "max_rss_kib": 1104,
         "max_rss_node": "n1", "ave_rss_kib": 1000, "cpu_s": 125.5, "gpus": 2, "gpu_util_pct": 10.0,
         "max_gpu_util_pct": 87.4, "ave_gpu_util_pct": 50.0, "max_gpu_mem_mib": 4146, "ave_gpu_mem_mib": 2048,
         "gpu_idle_s": 0.0}


@pytest.mark.parametrize(("value", "text"), [
    (0, "0"), (1000, "1000"), (1104 * 1024, "1104K"), (1025 * 1024, "1025K"), (512 * 1024, "512K"),
    (100 * 1024 * 1024, "100M"), (2 * 1024 ** 3, "2G"), (1536 * 1024 * 1024, "1.50G"), (1537 * 1024 * 1024, "1537M"),
])
def test_memory_scales_only_while_exact(value, text):
    assert num_unit(value) == text


@pytest.mark.parametrize(("seconds", "subseconds", "text"), [
    (0, True, "00:00:00"), (1.234, True, "00:01.234"), (61, True, "00:01:01"), (61.5, False, "00:01:01"),
    (3725.25, True, "01:02:05"), (90061, True, "01-01:01:01"),
])
def test_cpu_times_as_sacct_prints_them(seconds, subseconds, text):
    assert cpu_time(seconds, subseconds) == text


STEPS = [{"step_id": "batch", "name": "batch", "state": "RUNNING", "nodelist": "n1", "num_tasks": 1,
          "start_time": T0 - 65, "end_time": None, "exit_code": 0, "exit_signal": 0, "usage": USAGE},
         {"step_id": "0", "name": "python", "state": "RUNNING", "nodelist": "n1", "num_tasks": 2,
          "start_time": T0 - 60, "end_time": None, "exit_code": 0, "exit_signal": 0,
          "usage": {**USAGE, "cpu_s": 10.0, "gpus": 0}}]


def test_sacct_fills_the_usage_columns_of_steps_and_the_total_cpu_of_the_job():
    record = running(5, batch=True, usage=USAGE, steps=STEPS)
    layout = Layout(parse_fields("JobID,MaxRSS,MaxRSSNode,AveRSS,AveCPU,TotalCPU,TRESUsageInMax,TRESUsageInAve"),
                    parsable="parsable2", header=False)
    assert render([record], layout, AcctView(T0)).splitlines() == [
        "5|||||02:15.500||",
        "5.batch|1104K|n1|1000K|00:02:05|02:05.500|cpu=00:02:05,gres/gpumem=4146M,gres/gpuutil=87,mem=1104K|"
        "cpu=00:02:05,gres/gpumem=2G,gres/gpuutil=50,mem=1000K",
        "5.0|1104K|n1|1000K|00:00:05|00:00:10|cpu=00:00:10,mem=1104K|cpu=00:00:10,mem=1000K",
    ]


def test_a_job_without_samples_shows_blanks():
    layout = Layout(parse_fields("JobID,MaxRSS,TotalCPU,TRESUsageInMax"), parsable="parsable2", header=False)
    assert render([running(6, usage={**USAGE, "samples": 0})], layout, AcctView(T0)) == "6|||\n"


def test_a_job_without_a_batch_step_shows_its_own_tasks_usage_on_its_line():
    layout = Layout(parse_fields("JobID,MaxRSS,AveCPU"), parsable="parsable2", header=False)
    assert render([running(7, num_tasks=2, usage=USAGE)], layout, AcctView(T0)) == "7|1104K|00:01:02\n"


@pytest.mark.parametrize(("ref", "all_steps", "rows"), [
    ("5", False, ["0"]), ("5", True, ["batch", "0"]), ("5.batch", False, ["batch"]), ("5.0", False, ["0"]),
])
def test_sstat_selects_running_steps_as_slurm(ref, all_steps, rows):
    record = running(5, batch=True, steps=STEPS)
    found, error = running_rows(record, parse_job_ref(ref, steps=True), all_steps)
    assert error is None and [s["step_id"] for s in found] == rows


def test_sstat_errors_for_steps_not_running():
    record = running(5, batch=True, steps=STEPS)
    assert running_rows(record, parse_job_ref("5.3", steps=True), False) == ([], "StepId=5.3 not found running.")
    ended = job(5, state="COMPLETED", steps=STEPS)
    assert running_rows(ended, parse_job_ref("5", steps=True), False) == ([], "No steps running for job 5")


def test_sstat_takes_array_tasks_as_the_other_commands_do():
    """`sstat -j N_I` was refused as an invalid job id."""
    options = parse_sstat(["-j", "12_3,12_4.batch,12_9", "-P", "-n", "-o", "JobID,NTasks", "-a"])
    assert [ref.text for ref in options.job_refs] == ["12_3", "12_4.batch", "12_9"]
    task = running(14, batch=True, steps=STEPS, array_job_id=12, array_task_id=3)
    other = running(15, batch=True, steps=STEPS, array_job_id=12, array_task_id=4)
    out, err, code = sstat_output(options, {"12_3": task, "12_4": other, "12_9": None}, T0)
    assert (out, err, code) == ("12_3.batch|1\n12_3.0|2\n12_4.batch|1\n",
                                "sstat: error: couldn't get steps for job 12_9\n", 0)
    ended = job(14, state="COMPLETED", array_job_id=12, array_task_id=3)
    assert running_rows(ended, parse_job_ref("12_3", steps=True), False) == ([], "No steps running for job 12_3")


def test_sstat_output_and_options():
    options = parse_sstat(["-j", "5.batch,9", "-P", "-o", "JobID,MaxRSS,NTasks"])
    out, err, code = sstat_output(options, {"5": running(5, batch=True, steps=STEPS), "9": None}, T0)
    assert (out, err, code) == ("JobID|MaxRSS|NTasks\n5.batch|1104K|1\n",
                                "sstat: error: couldn't get steps for job 9\n", 0)
    with pytest.raises(SlurmCommandError, match="You didn't give me any jobs to stat"):
        parse_sstat(["-P"])
    with pytest.raises(SlurmCommandError, match='Invalid field requested: "JobName"'):
        sstat_output(parse_sstat(["-j", "5", "-o", "jobname"]), {}, T0)
