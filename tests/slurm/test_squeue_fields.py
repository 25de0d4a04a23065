"""squeue asks the controller for SQUEUE_FIELDS at most, and for a format whose fields declare what they
read, for those only (squeue_fields): the jobs Slurm printed in the golden recordings, and every squeue
field of them, print the same without the fields it leaves out."""
from __future__ import annotations

import pytest

from corral.slurm.common.http import JOB_LINE_FIELDS
from corral.slurm.squeue import select
from corral.slurm.squeue.fields import LETTERS, LONG_NAMES
from corral.slurm.squeue.main import SQUEUE_FIELDS, server_filters, squeue_fields
from corral.slurm.squeue.opts import parse_squeue
from corral.slurm.squeue.output import squeue_output

from . import golden_records as golden
from .test_golden_jobs import SQUEUE, _phase, candidate_nows

LEFT_OUT = frozenset(JOB_LINE_FIELDS) - frozenset(SQUEUE_FIELDS)


def _without_left_out(jobs: list[dict]) -> list[dict]:
    return [{key: value for key, value in job.items() if key not in LEFT_OUT} for job in jobs]


def _golden_jobs() -> list[dict]:
    return golden.jobs_from_scontrol("queue") + golden.jobs_from_scontrol("final")


def _only(jobs: list[dict], fields: tuple[str, ...]) -> list[dict]:
    return [{key: value for key, value in job.items() if key in fields} for job in jobs]


def test_squeue_leaves_out_only_what_it_never_shows() -> None:
    assert LEFT_OUT == {"gpu_seconds", "gpu_idle_flagged", "position", "elapsed_s", "estimated_start_source"}
    assert server_filters(parse_squeue(["-O", "numtasks"], {}), None)["fields"] == SQUEUE_FIELDS  # not declared
    assert server_filters(parse_squeue(["-S", "C"], {}), None)["fields"] == SQUEUE_FIELDS
    assert "fields" not in server_filters(parse_squeue(["-s"], {}), None)  # steps come with whole records


def test_the_default_listing_asks_for_a_few_fields() -> None:
    fields = server_filters(parse_squeue([], {}), None)["fields"]
    assert set(fields) == {*select.SELECT_READS, "user", "nodelist", "priority", "start_time", "end_time",
                           "num_nodes", "held", "exit_signal"}
    assert not {"uid", "account", "qos", "reservation"} & set(fields)  # read by filters not given
    assert len(fields) < len(SQUEUE_FIELDS) / 2


def test_declared_reads_are_fields_squeue_may_ask_for() -> None:
    declared = [*select.SELECT_READS, *(name for reads in select.FILTER_READS.values() for name in reads),
                *(name for reads in select.SORT_READS.values() for name in reads),
                *(name for field in [*LETTERS.values(), *LONG_NAMES.values()] for name in field.reads or ())]
    assert set(declared) <= set(SQUEUE_FIELDS)


@pytest.mark.parametrize("name", SQUEUE)
def test_golden_outputs_are_the_same_with_only_the_fields_squeue_asks_for(name) -> None:
    fixture = golden.fixture(name)
    if fixture["exit_code"]:
        pytest.skip("refused options: no jobs printed")
    options = parse_squeue(fixture["argv"][1:], {})
    if options.action:
        pytest.skip("prints no jobs")
    jobs = golden.jobs_from_scontrol(_phase(fixture))
    now = candidate_nows(fixture)[0]
    assert squeue_output(options, _only(jobs, squeue_fields(options)), now) == squeue_output(options, jobs, now)


@pytest.mark.parametrize("spec", [spec for spec in [*LETTERS, *LONG_NAMES]
                                  if (LETTERS.get(spec) or LONG_NAMES[spec]).reads is not None])
@pytest.mark.parametrize("sort", ["", *select.SORT_READS])
def test_every_declared_field_and_sort_key_reads_only_what_it_declares(spec, sort) -> None:
    """Each field alone, sorted by each key, over every golden job (pending, running, held, arrays, failed,
    timed out, completed): the line is the same from a record of only the fields asked for."""
    argv = ["-o", f"%{spec}"] if len(spec) == 1 else ["-O", spec]
    options = parse_squeue([*argv, "-t", "all", *(["-S", sort] if sort else [])], {})
    fields = squeue_fields(options)
    assert fields != SQUEUE_FIELDS
    jobs = _golden_jobs() + _corner_jobs()
    for now in (1_700_000_000.0, 2_000_000_000.0):
        full = squeue_output(options, jobs, now)
        assert full[0].count("\n") == len(jobs) + 1
        assert squeue_output(options, _only(jobs, fields), now) == full


def _corner_jobs() -> list[dict]:
    """What the recordings lack: reasons squeue fills in itself (a failed job's signal, a time limit, a hold
    over another reason), a pending job with a forecast start."""
    base = _golden_jobs()[0]
    changes = [{"state": "FAILED", "reason": None, "exit_signal": 9}, {"state": "FAILED", "reason": None},
               {"state": "TIMEOUT", "reason": None}, {"state": "PENDING", "reason": "Priority", "held": True},
               {"state": "PENDING", "reason": "Resources", "estimated_start": 1_800_000_000.0}]
    return [{**base, "id": 900_000 + n, **change} for n, change in enumerate(changes)]


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


@pytest.mark.parametrize(("option", "field"), [("-A", "account"), ("-q", "qos"), ("-u", "uid"), ("-u", "user"),
                                               ("-R", "reservation"), ("-w", "nodelist"), ("-n", "name"),
                                               ("-p", "partition")])
def test_a_filter_asks_for_what_it_reads_only_when_given(option, field) -> None:
    """The filters' fields are asked for with their filter only; given, the filter keeps the same jobs from a
    record of only the fields asked for as from the whole record (filtering by a golden job's value)."""
    jobs = [*_golden_jobs(), *_corner_jobs(), {**_golden_jobs()[0], "id": 900_100, "reservation": "maint"}]
    value = next(str(job[field]) for job in jobs if job.get(field) not in (None, ""))
    if option == "-w":
        value = value.split(",")[0]
    options = parse_squeue(["-o", "%i", "-t", "all", option, value], {})
    fields = squeue_fields(options)
    assert field in fields
    if field not in select.SELECT_READS:
        assert field not in squeue_fields(parse_squeue(["-o", "%i", "-t", "all"], {}))
    for now in (1_700_000_000.0, 2_000_000_000.0):
        full = squeue_output(options, jobs, now)
        assert full[0].count("\n") > 1  # a header and the jobs the filter keeps (from a record without the field: none)
        assert squeue_output(options, _only(jobs, fields), now) == full


def test_me_asks_for_the_users_fields() -> None:
    assert {"user", "uid"} <= set(squeue_fields(parse_squeue(["-o", "%i", "--me"], {})))
