"""sacct asks the controller for SACCT_FIELDS (every field but the history), so that the controller builds no
whole record per job: every golden recording, and every sacct field of every golden job with its steps, prints
the same from records of those fields only."""
from __future__ import annotations

import pytest

from corral.api.schemas import JobOut
from corral.slurm.sacct.fields import FIELDS
from corral.slurm.sacct.main import SACCT_FIELDS
from corral.slurm.sacct.opts import parse_sacct
from corral.slurm.sacct.output import sacct_output

from . import golden_records as golden
from .test_golden_jobs import CLUSTER, SACCT, _phase, candidate_nows


def _only(jobs: list[dict], fields=SACCT_FIELDS) -> list[dict]:
    return [{key: value for key, value in job.items() if key in fields} for job in jobs]


def _sent(jobs: list[dict]) -> list[dict]:
    """What a controller may send of the recorded jobs: JobOut's fields (the recordings hold a few more that
    sacct reads when present: group, gid, eligible time)."""
    return _only(jobs, tuple(JobOut.model_fields))


def test_sacct_asks_for_every_field_but_the_history() -> None:
    assert set(JobOut.model_fields) - set(SACCT_FIELDS) == {"history"}


def golden_case(name: str) -> tuple:
    """A sacct golden's parsed options, the jobs as the controller sends them, and its time; skipped where it
    prints no jobs."""
    fixture = golden.fixture(name)
    if fixture["exit_code"]:
        pytest.skip("refused options: no jobs printed")
    options = parse_sacct(fixture["argv"][1:], {})
    if options.action:
        pytest.skip("prints no jobs")
    return options, _sent(golden.jobs_from_sacct(_phase(fixture))), candidate_nows(fixture)[0]


@pytest.mark.parametrize("name", SACCT)
def test_golden_outputs_are_the_same_from_the_fields_sacct_asks_for(name) -> None:
    options, jobs, now = golden_case(name)
    assert sacct_output(options, _only(jobs), now, cluster=CLUSTER) == sacct_output(options, jobs, now,
                                                                                  cluster=CLUSTER)


def test_every_field_prints_the_same_from_the_fields_sacct_asks_for() -> None:
    jobs = [job for name in SACCT for job in golden.jobs_from_sacct(_phase(golden.fixture(name)))]
    jobs = _sent(list({job["id"]: job for job in jobs}.values()))
    assert any(job.get("steps") for job in jobs)
    options = parse_sacct(["-a", "-P", "-o", ",".join(field.name for field in FIELDS)], {})
    now = 2_000_000_000.0
    full = sacct_output(options, jobs, now, cluster=CLUSTER)
    assert full[0].count("\n") > len(jobs)  # a header, each job and its steps
    assert sacct_output(options, _only(jobs), now, cluster=CLUSTER) == full
