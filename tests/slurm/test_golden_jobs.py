"""squeue and sacct against outputs recorded from real Slurm 22.05 (see normalize.py for the few
tolerated differences). Each fixture's argv goes through corral's parser, its jobs through corral's
selection and formatting, and the result must be what Slurm printed, on stdout, stderr and exit."""
from __future__ import annotations

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sacct.opts import parse_sacct
from corral.slurm.sacct.output import sacct_output
from corral.slurm.squeue.opts import parse_squeue
from corral.slurm.squeue.output import squeue_output

from . import golden_records as golden
from . import normalize

SQUEUE = [n for n in golden.fixture_names() if n.startswith("squeue_")]
SACCT = [n for n in golden.fixture_names() if n.startswith("sacct_")]
CLUSTER = "anchor"  # the recorded cluster's name (sacct's Cluster field)


def _phase(fixture: dict) -> str:
    return "final" if fixture["phase"] == "final" else "queue"


def run_squeue(fixture: dict, now: float) -> tuple[str, str, int]:
    try:
        options = parse_squeue(fixture["argv"][1:], {})
    except SlurmCommandError as exc:
        return exc.stdout, exc.stderr, exc.exit_code
    return squeue_output(options, golden.jobs_from_scontrol(_phase(fixture)), now)


def run_sacct(fixture: dict, now: float) -> tuple[str, str, int]:
    try:
        options = parse_sacct(fixture["argv"][1:], {})
    except SlurmCommandError as exc:
        return exc.stdout, exc.stderr, exc.exit_code
    return sacct_output(options, golden.jobs_from_sacct(_phase(fixture)), now, cluster=CLUSTER)


def candidate_nows(fixture: dict) -> list[int]:
    """The recorded command ran within this second or the next (normalize.py, rule 2)."""
    start = int(fixture["started_at"])
    return [start, start + 1]


def _header_lines(fixture: dict) -> int:
    argv = fixture["argv"]
    if fixture["exit_code"] or "-h" in argv or any(a.startswith("--noheader") for a in argv):
        return 0
    return 2 if "-l" in argv else 1


@pytest.mark.parametrize("name", SQUEUE)
def test_squeue_matches_real_slurm(name):
    fixture = golden.fixture(name)
    header_lines = _header_lines(fixture)
    expected = normalize.rows_and_header(fixture["stdout"], header_lines)
    results = [run_squeue(fixture, now) for now in candidate_nows(fixture)]
    matching = [r for r in results if normalize.rows_and_header(r[0], header_lines) == expected]
    assert matching, f"{name}: no candidate time gives Slurm's rows:\n{results[0][0]}\n---\n{fixture['stdout']}"
    stdout, stderr, exit_code = matching[0]
    assert (stderr, exit_code) == (fixture["stderr"], fixture["exit_code"])
    header = stdout.splitlines()[header_lines - 1] if header_lines else ""
    if "ST" in header.split():
        assert normalize.state_column(stdout, header_lines) == normalize.state_column(fixture["stdout"], header_lines)


def _sacct_header_lines(fixture: dict) -> int:
    argv = fixture["argv"]
    if fixture["exit_code"] or "-n" in argv:
        return 0
    return 1 if {"-p", "-P", "--parsable2"} & set(argv) else 2


@pytest.mark.parametrize("name", SACCT)
def test_sacct_matches_real_slurm(name):
    fixture = golden.fixture(name)
    header_lines = _sacct_header_lines(fixture)
    stdout, stderr, exit_code = run_sacct(fixture, candidate_nows(fixture)[0])
    assert normalize.sacct_blocks(stdout, header_lines) == normalize.sacct_blocks(fixture["stdout"], header_lines)
    assert (stderr, exit_code) == (fixture["stderr"], fixture["exit_code"])


def test_submitit_status_query_parses_like_submitit():
    """submitit's reader: header keys from line 1, skip steps, `A_[..]` remainders, `CANCELLED by 0`."""
    fixture = golden.fixture("sacct_submitit")
    stdout, _, _ = run_sacct(fixture, candidate_nows(fixture)[0])
    header, *rows = stdout.splitlines()
    assert header == "JobID|State|NodeList"
    parsed = [dict(zip(header.split("|"), row.split("|"), strict=True)) for row in rows]
    jobs = [r for r in parsed if "." not in r["JobID"]]
    held = golden.fixture("sacct_submitit")["roles"]["held"]
    assert {"JobID": str(held), "State": "CANCELLED by 0", "NodeList": "None assigned"} in jobs
