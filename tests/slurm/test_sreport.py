"""sreport against real Slurm 22.05's output (golden_reports/README.md says how it was recorded): the
anchor's four jobs, as corral's accounting returns them, give Slurm's sums and layout."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sreport import output
from corral.slurm.sreport.opts import parse_sreport
from corral.slurm.sreport.usage import Tree, job_usage, node_tres, report_window

GOLDEN = Path(__file__).resolve().parent / "golden_reports"
NOW = time.mktime((2026, 11, 24, 16, 17, 0, 0, 0, -1))


def local(day: int, hour: int, minute: int = 0) -> float:
    return time.mktime((2026, 11, day, hour, minute, 0, 0, 0, -1))


def job(job_id: int, account: str, cpus: int, gpus: int, start: float, end: float | None) -> dict:
    return {"id": job_id, "user": "root", "account": account, "start_time": start, "end_time": end,
            "slices": [{"node": "node1", "cpus": cpus, "mem_mib": 0, "gpus": list(range(gpus))}]}


JOBS = [job(1, "lab", 4, 2, local(23, 10), local(23, 12, 30)), job(3, "lab", 4, 2, local(22, 23), local(23, 1)),
        job(2, "ml", 2, 1, local(23, 9), local(23, 9, 45)), job(4, "ml", 2, 1, local(23, 23, 30), local(24, 0, 30)),
        {"id": 5, "user": "root", "account": "ml", "start_time": None, "end_time": None, "slices": []}]
NODES = [{"name": f"node{i}", "cpus": 16, "mem_mib": 64000, "gpus": [{} for _ in range(8)]} for i in range(1, 5)]
ACCOUNTS = [{"name": "lab", "parent": None}, {"name": "ml", "parent": None}]


def render(*argv: str, jobs: list[dict] = JOBS) -> str:
    options = parse_sreport(list(argv))
    window = report_window(options.start_text, options.end_text, NOW)
    usage = job_usage(jobs, window, NOW)
    capacity = {k: v * window.seconds for k, v in node_tres(NODES).items()}
    text = output.banner(options, window)
    if options.report == "Utilization":
        return text + output.utilization(options, "anchor", usage, capacity)
    if options.report == "TopUsage":
        return text + output.top_usage(options, "anchor", usage, capacity, lambda user: user)
    tree = Tree.of(ACCOUNTS, (u.account for u in usage))
    return text + output.account_utilization_by_user(options, "anchor", usage, tree, capacity, lambda user: user)


DAY = ["start=2026-11-23", "end=2026-11-24"]


@pytest.mark.parametrize(("argv", "name"), [
    (["cluster", "AccountUtilizationByUser", *DAY], "sreport_acct_by_user"),
    (["-t", "hours", "cluster", "AccountUtilizationByUser", *DAY], "sreport_acct_by_user_hours"),
    (["-t", "percent", "cluster", "AccountUtilizationByUser", *DAY], "sreport_acct_by_user_percent"),
    (["-T", "cpu,gres/gpu", "cluster", "AccountUtilizationByUser", *DAY], "sreport_acct_by_user_tres"),
    (["-P", "cluster", "AccountUtilizationByUser", *DAY], "sreport_acct_by_user_parsable"),
    (["user", "TopUsage", *DAY], "sreport_top_usage"),
    (["-P", "-T", "gres/gpu", "user", "TopUsage", *DAY], "sreport_top_usage_gpu_parsable"),
    (["cluster", "utilization", *DAY], "sreport_utilization"),
    (["-P", "-n", "cluster", "utilization", *DAY], "sreport_utilization_parsable_noheader"),
    (["-t", "hourper", "cluster", "utilization", *DAY], "sreport_utilization_hourper"),
])
def test_matches_slurm_byte_for_byte(argv, name):
    assert render(*argv) == (GOLDEN / f"{name}.txt").read_text()


def window(start: str | None, end: str | None) -> tuple[float, float]:
    found = report_window(start, end, NOW)
    return found.start, found.end


def test_window_rounds_to_hours_as_slurm_does():
    # Seen from Slurm: start=10:30 end=12:10 reports 11:00-12:00; a window under an hour grows to one;
    # no start: the midnight before the end; no end: today's midnight; an end past now: now's hour.
    assert window("2026-11-23T10:30", "2026-11-23T12:10") == (local(23, 11), local(23, 12))
    assert window("2026-11-23T10:00", "2026-11-23T10:20") == (local(23, 10), local(23, 11))
    assert window(None, "2026-11-23T10:00") == (local(23, 0), local(23, 10))
    assert window(None, None) == (local(23, 0), local(24, 0))
    assert window("2026-11-24", "2026-11-25") == (local(24, 0), local(24, 16))


def test_a_running_job_counts_up_to_now():
    running = [job(9, "lab", 1, 0, local(24, 15), None)]
    out = render("-t", "seconds", "-P", "-n", "user", "TopUsage", "start=2026-11-24T15:00", "end=now", jobs=running)
    assert out == "anchor|root|root|lab|3600|0\n"  # the window ends at 16:00, the job is still running


def test_top_count_group_and_conditions():
    assert render("-n", "-P", "user", "top", "TopCount=1", *DAY) == "anchor|root|root|lab|840|0\n"
    assert render("-n", "-P", "user", "top", "group", *DAY) == "anchor|root|root|lab,ml|990|0\n"
    with pytest.raises(SlurmCommandError, match="Unknown condition: bogus=1"):
        parse_sreport(["user", "top", "bogus=1"])


@pytest.mark.parametrize(("argv", "message"), [
    (["cluster", "bogus"], "Not valid report bogus"),
    (["job", "sizes"], "corral has cluster and user reports, not 'job'"),
    (["-T", "foo", "cluster", "utilization"], "No valid TRES given: foo"),
    (["-t", "weird", "cluster", "utilization"], "unknown time format weird"),
    ([], "name a report"),
])
def test_bad_input_is_a_clear_error(argv, message):
    with pytest.raises(SlurmCommandError, match=message):
        parse_sreport(argv)
