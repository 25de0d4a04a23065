"""sbatch, scancel, scontrol and sinfo against outputs recorded from real Slurm 22.05 (see
normalize.py for the tolerated differences)."""
from __future__ import annotations

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sbatch.opts import apply_script, invalid_partition, parse_sbatch, submitted_line
from corral.slurm.scancel.opts import parse_scancel
from corral.slurm.scancel.targets import select_targets
from corral.slurm.scontrol.opts import parse_scontrol
from corral.slurm.scontrol.output import scontrol_show_output
from corral.slurm.sinfo.opts import parse_sinfo
from corral.slurm.sinfo.output import sinfo_output

from . import golden_records as golden
from . import normalize
from .record_golden import STEP_SCRIPT

CONFIG_LINES_COMPARED = 12


def _names(prefix: str) -> list[str]:
    return [n for n in golden.fixture_names() if n.startswith(prefix)]


def _nows(fixture: dict) -> list[int]:
    return [int(fixture["started_at"]), int(fixture["started_at"]) + 1]


@pytest.mark.parametrize("name", _names("sinfo_"))
def test_sinfo_matches_real_slurm(name):
    fixture = golden.fixture(name)
    options = parse_sinfo(fixture["argv"][1:], {})
    parts, nodes = golden.partitions_from_scontrol("queue_after"), golden.nodes_from_scontrol("queue_after")
    results = [sinfo_output(options, parts, nodes, now) for now in _nows(fixture)]
    assert (fixture["stdout"], fixture["stderr"], fixture["exit_code"]) in results


def run_scontrol(fixture: dict, now: float, config: list[tuple[str, str]]) -> tuple[str, str, int]:
    try:
        command = parse_scontrol(fixture["argv"][1:])
    except SlurmCommandError as exc:
        return exc.stdout, exc.stderr, exc.exit_code
    return scontrol_show_output(command, jobs=golden.jobs_from_scontrol("queue"),
                                nodes=golden.nodes_from_scontrol("queue_after"),
                                partitions=golden.partitions_from_scontrol("queue_after"), config=config, now=now)


def _config_pairs(text: str) -> list[tuple[str, str]]:
    lines = text.splitlines()[1:CONFIG_LINES_COMPARED]
    return [(key.rstrip(), value) for key, _, value in (line.partition(" = ") for line in lines)]


@pytest.mark.parametrize("name", _names("scontrol_"))
def test_scontrol_matches_real_slurm(name):
    fixture = golden.fixture(name)
    expected = fixture["stdout"]
    results = [run_scontrol(fixture, now, _config_pairs(expected)) for now in _nows(fixture)]
    if name == "scontrol_show_config":
        expected = "".join(line + "\n" for line in expected.splitlines()[:CONFIG_LINES_COMPARED])
    elif name.startswith("scontrol_show_job"):
        expected = normalize.scontrol_job_blocks(expected)
        results = [(normalize.scontrol_job_blocks(out), err, code) for out, err, code in results]
    elif name == "scontrol_show_node":
        expected = normalize.scontrol_node(expected)
        results = [(normalize.scontrol_node(out), err, code) for out, err, code in results]
    assert (expected, fixture["stderr"], fixture["exit_code"]) in results


@pytest.mark.parametrize("name", _names("scancel_"))
def test_scancel_matches_real_slurm(name):
    fixture = golden.fixture(name)
    try:
        options = parse_scancel(fixture["argv"][1:], {})
        targets, stderr, exit_code = select_targets(options, golden.jobs_from_scontrol("queue"))
    except SlurmCommandError as exc:
        targets, stderr, exit_code = [], exc.stderr, exc.exit_code
    assert ("", stderr, exit_code) == (fixture["stdout"], fixture["stderr"], fixture["exit_code"])
    if name == "scancel_running":
        assert [job["id"] for _, job in targets] == [fixture["roles"]["cancelled"]]


def _script_text(fixture: dict, source) -> str:
    return {"wrap": source.text, "file": STEP_SCRIPT, "stdin": fixture["stdin"]}[source.kind]


def run_sbatch(fixture: dict) -> tuple[str, str, int]:
    try:
        options, source = parse_sbatch(fixture["argv"][1:], {})
        options = apply_script(options, _script_text(fixture, source))
        if options.submit.get("partition") == "nosuch":  # the controller's answer, as corral's will be
            raise invalid_partition("nosuch")
    except SlurmCommandError as exc:
        return exc.stdout, exc.stderr, exc.exit_code
    job_id = int(fixture["stdout"].split()[-1].split(";")[0])
    return submitted_line(job_id, parsable=options.parsable), "".join(options.warnings), 0


@pytest.mark.parametrize("name", _names("sbatch_"))
def test_sbatch_matches_real_slurm(name):
    fixture = golden.fixture(name)
    assert run_sbatch(fixture) == (fixture["stdout"], fixture["stderr"], fixture["exit_code"])


@pytest.mark.parametrize(("name", "fields"), [
    ("sbatch_wrap", {"name": "tmo", "time_limit_s": 5}),
    ("sbatch_parsable", {"nodes": 2, "gpus_per_node": 2, "name": "twonode", "time_limit_s": 600}),
    ("sbatch_script_file", {"name": "steps", "ntasks": 2, "time_limit_s": 300}),
    ("sbatch_stdin", {"name": "fromstdin", "time_limit_s": 120}),
    ("sbatch_array", {"array": "0-9%2", "name": "arr", "time_limit_s": 300}),
])
def test_recorded_submissions_translate_to_job_submit_fields(name, fields):
    fixture = golden.fixture(name)
    options, source = parse_sbatch(fixture["argv"][1:], {})
    assert apply_script(options, _script_text(fixture, source)).submit == {"batch": True, **fields}


def test_fixture_files_are_complete():
    for name in golden.fixture_names():
        fixture = golden.fixture(name)
        assert {"argv", "stdin", "stdout", "stderr", "exit_code", "notes"} <= set(fixture), name
