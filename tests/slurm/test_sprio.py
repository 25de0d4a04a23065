"""sprio against outputs recorded from real Slurm 22.05 (record_golden_more.py), and its option table."""
from __future__ import annotations

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sprio.opts import SprioOptions, parse_sprio
from corral.slurm.sprio.output import default_format, sort_jobs, sprio_output

from . import golden_records as golden

# Columns of `sprio -l`, in order.
_LONG_COLUMNS = ("job_id", "partition", "user", "priority", "site", "age", "assoc", "fairshare", "job_size",
                 "partition_factor", "qos_factor", "nice")
_WEIGHT_NAMES = ("site", "weight_age", "weight_assoc", "weight_fairshare", "weight_job_size", "weight_partition",
                 "weight_qos")


def recorded_priorities() -> list[dict]:
    """PriorityOut records of the pending jobs `sprio -l` showed (NICE is corral's nice negated)."""
    records = []
    for line in golden.fixture("sprio_long")["stdout"].splitlines()[1:]:
        values = dict(zip(_LONG_COLUMNS, line.split(), strict=False))
        record = {k: (v if k in ("partition", "user") else int(v)) for k, v in values.items()}
        record["nice"] = -record["nice"]
        records.append(record)
    return records


def recorded_weights() -> dict[str, int]:
    line = golden.fixture("sprio_long_weights")["stdout"].splitlines()[1]
    return {k: int(v) for k, v in zip(_WEIGHT_NAMES, line.split()[1:], strict=False)}


def run_sprio(argv: list[str]) -> tuple[str, str, int]:
    try:
        return sprio_output(parse_sprio(argv, {}), recorded_priorities(), recorded_weights())
    except SlurmCommandError as exc:
        return exc.stdout, exc.stderr, exc.exit_code


@pytest.mark.parametrize("name", [n for n in golden.fixture_names() if n.startswith("sprio_")])
def test_sprio_matches_real_slurm(name):
    fixture = golden.fixture(name)
    assert run_sprio(fixture["argv"][1:]) == (fixture["stdout"], fixture["stderr"], fixture["exit_code"])


def test_recorded_weights_are_corrals_defaults():
    """The anchor's PriorityWeightAge/Fairshare are corral's defaults: the default layouts compare."""
    assert recorded_weights()["weight_age"] == 1000 and recorded_weights()["weight_fairshare"] == 10000


@pytest.mark.parametrize(("weights", "spec"), [
    ({}, "%.15i %9r %.10Y %.10S"),
    ({"weight_job_size": 5, "weight_qos": 1}, "%.15i %9r %.10Y %.10S %.10J %.10Q"),
])
def test_default_columns_follow_the_weights(weights, spec):
    assert default_format(SprioOptions(), weights) == spec


def test_nice_shows_corrals_adjustment_negated():
    job = {"job_id": 1, "partition": "gpu", "user": "ada", "priority": 150, "nice": 50}
    out, _, _ = sprio_output(SprioOptions(format="%i %N %Y"), [job], {})
    assert out.splitlines()[1] == "1 -50 150"


def test_sort_by_priority_then_id():
    jobs = [{"job_id": i, "priority": p} for i, p in ((3, 10), (1, 10), (2, 20))]
    assert [j["job_id"] for j in sort_jobs(jobs, "-y,i")] == [2, 1, 3]
    with pytest.raises(SlurmCommandError) as caught:
        sort_jobs(jobs, "z")
    assert caught.value.stderr == "sprio: error: Invalid sort specification: z\n"


def test_users_and_partitions_filter():
    jobs = [{"job_id": 1, "user": "ada", "partition": "gpu"}, {"job_id": 2, "user": "bob", "partition": "cpu"}]
    out, _, _ = sprio_output(parse_sprio(["-h", "-o", "%i", "-u", "bob"], {}), jobs, {})
    assert out == "2\n"
    out, _, _ = sprio_output(parse_sprio(["-h", "-o", "%i", "-p", "gpu"], {}), jobs, {})
    assert out == "1\n"


@pytest.mark.parametrize(("argv", "stderr"), [
    (["-l", "-o", "%i"], "sprio: fatal: Options -o(--format) and -l(--long) are mutually exclusive. "
                         "Please remove one and retry.\n"),
    (["-j", "1", "extra"], "sprio: error: Unrecognized option: extra\n"),
])
def test_command_line_errors(argv, stderr):
    with pytest.raises(SlurmCommandError) as caught:
        parse_sprio(argv, {})
    assert caught.value.stderr == stderr


def test_format_from_the_environment_unless_given():
    assert parse_sprio([], {"SPRIO_FORMAT": "%i"}).format == "%i"
    assert parse_sprio(["-o", "%Y"], {"SPRIO_FORMAT": "%i"}).format == "%Y"
    assert parse_sprio(["-l"], {"SPRIO_FORMAT": "%i"}).format is None
    assert [r.job_id for r in parse_sprio(["-j", "12,13_[1-2],14.0"], {}).job_ids] == [12, 13, 14]


def test_job_ids_name_array_tasks_as_slurm_reads_them():
    """Array 20's tasks 0-2 have ids 20-22; job 2 stands apart. sprio once read `20_2` as job 20."""
    jobs = [{"job_id": 20 + t, "array_job_id": 20, "array_task_id": t} for t in range(3)] + [{"job_id": 2}]

    def shown(ids):
        out, _, _ = sprio_output(parse_sprio(["-h", "-o", "%i", "-j", ids], {}), jobs, {})
        return out.split()

    assert shown("20_2") == ["22"]
    assert shown("20") == ["20", "21", "22"]
    assert shown("20_[0-1],2.batch") == ["2", "20", "21"]
    assert shown("21_0") == ["Unable", "to", "find", "jobs", "matching", "user/id(s)", "specified"]


@pytest.mark.parametrize("bad", ["1_5_3", "+3", "\u0663", "0x10", "9223372036854775808"])
def test_job_ids_int_would_misread_are_refused(bad):
    with pytest.raises(SlurmCommandError) as caught:
        parse_sprio(["-j", f"2,{bad}"], {})
    assert caught.value.stderr == f"sprio: error: Invalid job id: {bad}\n"
