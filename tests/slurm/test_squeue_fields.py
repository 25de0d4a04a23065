"""squeue asks the controller for SQUEUE_FIELDS only: the jobs Slurm printed in the golden recordings, and
every squeue field of them, print the same without the fields it leaves out."""
from __future__ import annotations

import pytest

from corral.slurm.common.http import JOB_LINE_FIELDS
from corral.slurm.squeue.fields import LETTERS, LONG_NAMES
from corral.slurm.squeue.main import SQUEUE_FIELDS, server_filters
from corral.slurm.squeue.opts import parse_squeue
from corral.slurm.squeue.output import squeue_output

from . import golden_records as golden
from .test_golden_jobs import SQUEUE, _phase, candidate_nows

LEFT_OUT = frozenset(JOB_LINE_FIELDS) - frozenset(SQUEUE_FIELDS)


def _without_left_out(jobs: list[dict]) -> list[dict]:
    return [{key: value for key, value in job.items() if key not in LEFT_OUT} for job in jobs]


def _golden_jobs() -> list[dict]:
    return golden.jobs_from_scontrol("queue") + golden.jobs_from_scontrol("final")


def test_squeue_leaves_out_only_what_it_never_shows() -> None:
    assert LEFT_OUT == {"gpu_seconds", "gpu_idle_flagged", "position", "elapsed_s", "estimated_start_source"}
    assert server_filters(parse_squeue([], {}), None)["fields"] == SQUEUE_FIELDS
    assert "fields" not in server_filters(parse_squeue(["-s"], {}), None)  # steps come with whole records


@pytest.mark.parametrize("name", SQUEUE)
def test_golden_outputs_are_the_same_without_the_left_out_fields(name) -> None:
    fixture = golden.fixture(name)
    if fixture["exit_code"]:
        pytest.skip("refused options: no jobs printed")
    options = parse_squeue(fixture["argv"][1:], {})
    if options.action:
        pytest.skip("prints no jobs")
    jobs = golden.jobs_from_scontrol(_phase(fixture))
    now = candidate_nows(fixture)[0]
    assert squeue_output(options, _without_left_out(jobs), now) == squeue_output(options, jobs, now)


@pytest.mark.parametrize("spec", [*LETTERS, *LONG_NAMES])
def test_every_field_prints_the_same_without_the_left_out_fields(spec) -> None:
    argv = ["-o", f"%{spec}"] if len(spec) == 1 else ["-O", spec]
    options = parse_squeue([*argv, "-t", "all"], {})
    jobs = _golden_jobs()
    for now in (1_700_000_000.0, 2_000_000_000.0):
        full = squeue_output(options, jobs, now)
        assert full[0].count("\n") == len(jobs) + 1  # a header and every job, nothing filtered away
        assert squeue_output(options, _without_left_out(jobs), now) == full
