"""sacct writes each page's lines as the page arrives (sacct_output_of_pages): whatever the pages' sizes, what
it prints is what sacct_output prints of all their jobs at once, pending array tasks combined across pages."""
from __future__ import annotations

import pytest

from corral.slurm.sacct.opts import parse_sacct
from corral.slurm.sacct.output import sacct_output, sacct_output_of_pages

from .test_sacct_reads import NOW, _golden_jobs


def _pending_tasks(array_id: int, tasks: range, *, partition: str = "gpu", submit: float = 1_999_000_000.0,
                   reason: str = "Priority") -> list[dict]:
    return [{"id": array_id + index, "name": "arr", "user": "alice", "uid": 1000, "state": "PENDING",
             "partition": partition, "submit_time": submit, "reason": reason, "array_job_id": array_id,
             "array_task_id": index, "num_tasks": 1, "cpus_per_task": 1, "steps": []} for index in tasks]


def _jobs() -> list[dict]:
    """The golden jobs and, between them, pending tasks of two arrays, one of them on two partitions with
    the same submission time (two combined records with the same sort key: their order is the first task's)."""
    golden = _golden_jobs()
    middle = len(golden) // 2
    spread = _pending_tasks(5000, range(0, 4), partition="b") + _pending_tasks(5000, range(4, 7), partition="a")
    other = _pending_tasks(6000, range(0, 3), reason="JobArrayTaskLimit")
    return [*golden[:middle], spread[0], *other, *golden[middle:], *spread[1:]]


@pytest.mark.parametrize("size", [1, 2, 7, 10_000])
@pytest.mark.parametrize("argv", [["-a"], ["-a", "-X", "-P", "-o", "JobID,State,Reason,Partition,Submit"],
                                  ["-u", "alice"], ["-a", "-s", "PD"]])
def test_pages_of_any_size_print_what_all_the_jobs_at_once_print(size, argv) -> None:
    jobs = _jobs()
    options = parse_sacct(argv, {})
    whole = sacct_output(options, jobs, NOW, cluster="anchor", user="alice")
    pages = (jobs[start:start + size] for start in range(0, len(jobs), size))
    assert sacct_output_of_pages(options, pages, NOW, cluster="anchor", user="alice") == whole
    if "-s" in argv:
        assert "5000_[0-3]" in whole[0] and "5000_[4-6]" in whole[0] and "6000_[0-2]" in whole[0]


def test_an_empty_listing_prints_the_header_only() -> None:
    options = parse_sacct(["-a"], {})
    printed = sacct_output_of_pages(options, iter(()), NOW)
    assert printed == sacct_output(options, [], NOW)
    assert printed[0].count("\n") == 2
