"""A short run of the fault suite in CI (`make chaos` runs the long one): two controllers on PostgreSQL and
four agents, each on a virtual host of its own, under a job load, faults injected (partitions included),
and no violation in the history."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chaos import run
from tests.multihost.netns import unavailable_reason
from tests.store.pg import pg_server_url_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_a_short_fault_run_has_no_violation(tmp_path: Path) -> None:
    pg_server_url_or_skip()  # PostgreSQL is installed (or the test says why not)
    if reason := unavailable_reason():
        pytest.skip(reason)
    report_file = tmp_path / "report.json"
    status = run.main(["--netns", "--controllers", "2", "--faults", "8", "--faults-per-round", "8",
                       "--jobs-per-round", "24", "--seed", "11", "--json", str(report_file)])
    report = json.loads(report_file.read_text())
    assert report["faults"] == 8 and report["jobs_accepted"] + report["submissions_unknown"] == 24
    assert report["violations"] == 0, report["violation_details"]
    assert status == 0
