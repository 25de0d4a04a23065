"""squeue's listing computed a column at a time (squeue/columnar.py, from table.JobColumns) prints exactly what
squeue_output prints from the records the same columns make: for every golden recording's options over its
jobs outside arrays, for every declared field sorted by every key, and for every filter."""
from __future__ import annotations

import pytest

from corral.slurm.common.table import JobColumns
from corral.slurm.squeue import select
from corral.slurm.squeue.columnar import columnar_output
from corral.slurm.squeue.fields import LETTERS, LONG_NAMES
from corral.slurm.squeue.main import squeue_fields
from corral.slurm.squeue.opts import parse_squeue
from corral.slurm.squeue.output import squeue_output

from . import golden_records as golden
from .test_golden_jobs import SQUEUE, _phase, candidate_nows
from .test_squeue_fields import _corner_jobs, _golden_jobs

NOWS = (1_700_000_000.0, 2_000_000_000.0)


def _outside_arrays(jobs: list[dict]) -> list[dict]:
    return [job for job in jobs if job.get("array_job_id") is None]


def _columns(jobs: list[dict], fields: tuple[str, ...]) -> JobColumns:
    """What the controller sends for these fields: every job's value of each (None where it has none)."""
    return JobColumns.of_records(fields, jobs)


def _both(argv: list[str], jobs: list[dict], now: float, user: str | None = None) -> tuple:
    """(column-wise output, squeue_output from records of the same columns)."""
    options = parse_squeue(argv, {})
    table = _columns(jobs, squeue_fields(options))
    columnar = columnar_output(options, table, now, user)
    assert columnar is not None, f"{argv}: not computed column-wise"
    return columnar, squeue_output(options, table.records(), now, user)


def _declared(argv: list[str]) -> bool:
    """Whether every field and sort key of these options declares what it reads (else: records)."""
    options = parse_squeue(argv, {})
    return select.sort_reads(options.sort) is not None and all(
        column.field is None or column.field.reads is not None for column in options.format.columns)


@pytest.mark.parametrize("name", SQUEUE)
def test_golden_options_print_the_same_column_wise(name) -> None:
    fixture = golden.fixture(name)
    if fixture["exit_code"]:
        pytest.skip("refused options: no jobs printed")
    options = parse_squeue(fixture["argv"][1:], {})
    if options.action or options.steps is not None:
        pytest.skip("prints no jobs, or steps (records only)")
    jobs = _outside_arrays(golden.jobs_from_scontrol(_phase(fixture)))
    now = candidate_nows(fixture)[0]
    if _declared(fixture["argv"][1:]):
        columnar, records = _both(fixture["argv"][1:], jobs, now)
        assert columnar == records
    table = _columns(jobs, squeue_fields(options))  # squeue_output takes columns, whichever way it goes
    assert squeue_output(options, table, now) == squeue_output(options, table.records(), now)
    assert squeue_output(options, table, now) == squeue_output(options, jobs, now)


@pytest.mark.parametrize("spec", [spec for spec in [*LETTERS, *LONG_NAMES]
                                  if (LETTERS.get(spec) or LONG_NAMES[spec]).reads is not None])
@pytest.mark.parametrize("sort", ["", *select.SORT_READS, "-p,t"])
def test_every_field_and_sort_key_prints_the_same_column_wise(spec, sort) -> None:
    argv = ["-o", f"%.5{spec}"] if len(spec) == 1 else ["-O", f"{spec}:.5,{spec}:3"]
    jobs = _outside_arrays(_golden_jobs() + _corner_jobs())
    for now in NOWS:
        columnar, records = _both([*argv, "-t", "all", *(["-S", sort] if sort else [])], jobs, now)
        assert columnar == records
        assert columnar[0].count("\n") == len(jobs) + 1 + argv.count("-l")  # -l: a time line first


@pytest.mark.parametrize("argv", [[], ["-l"], ["--start"], ["-h", "-t", "PD"], ["-u", "alice"], ["--me"],
                                  ["-p", "gpu"], ["-A", "physics"], ["-q", "normal"], ["-n", "train"],
                                  ["-R", "maint"], ["-w", "n1"], ["-j", "900001"], ["-j", "424242"]])
def test_filters_keep_the_same_jobs_column_wise(argv) -> None:
    jobs = _outside_arrays(_golden_jobs() + _corner_jobs())
    for now in NOWS:
        columnar, records = _both(argv, jobs, now, user="alice")
        assert columnar == records


def test_a_job_id_printed_by_a_pending_job_alike_many_times() -> None:
    """Thousands of jobs alike but their ids and names (what a 100,000-job queue looks like): the values are
    computed per group of alike jobs, and still land on the right lines, sorted by the default keys."""
    base = _outside_arrays(_golden_jobs())[0]
    jobs = [{**base, "id": n, "name": f"n{n % 7}", "state": "PENDING" if n % 3 else "RUNNING",
             "priority": n % 5, "reason": "Priority", "start_time": base.get("start_time") or 1.0}
            for n in range(1, 3000)]
    for argv in ([], ["-l"], ["-S", "-p,i"]):
        columnar, records = _both(argv, jobs, NOWS[0])
        assert columnar == records
        assert columnar[0].count("\n") == len(jobs) + 1 + argv.count("-l")  # -l: a time line first


def test_arrays_and_steps_are_left_to_the_records() -> None:
    arrays = [job for job in _golden_jobs() if job.get("array_job_id") is not None]
    assert arrays, "the recordings hold arrays"
    options = parse_squeue([], {})
    assert columnar_output(options, _columns(arrays, squeue_fields(options)), NOWS[0]) is None
    table = _columns(arrays, squeue_fields(options))
    assert squeue_output(options, table, NOWS[0]) == squeue_output(options, table.records(), NOWS[0])
    steps = parse_squeue(["-s"], {})
    plain = _outside_arrays(_golden_jobs())
    assert columnar_output(steps, _columns(plain, squeue_fields(options)), NOWS[0]) is None


def test_mixed_number_types_are_not_shared() -> None:
    """1 and 1.0 (and True) are equal keys but print apart: such a column is read per job."""
    base = _outside_arrays(_golden_jobs())[0]
    jobs = [{**base, "id": 1, "num_nodes": 1}, {**base, "id": 2, "num_nodes": 1.0},
            {**base, "id": 3, "num_nodes": True}]
    columnar, records = _both(["-h", "-o", "%i %D"], jobs, NOWS[0])
    assert columnar == records
    assert columnar[0] == "1 1\n2 1.0\n3 True\n"
