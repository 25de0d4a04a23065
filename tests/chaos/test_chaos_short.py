"""A short run of the fault suite in CI (`make chaos` runs the long one): two controllers on PostgreSQL and
four agents, each on a virtual host of its own, under a job load, faults injected (partitions included),
and no violation in the history; and a pause of every controller that kills no job."""
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


def test_a_20_s_pause_of_every_controller_kills_no_job(tmp_path: Path) -> None:
    """Both controllers stopped for 20 s (past the fencing at 10 s and the node timeout at 15 s): the nodes
    freeze their jobs and thaw them when the controllers answer again; none loses its run (decision 0017)."""
    pg_server_url_or_skip()
    if reason := unavailable_reason():
        pytest.skip(reason)
    report_file = tmp_path / "report.json"
    run.main(["--netns", "--controllers", "2", "--faults", "1", "--faults-per-round", "1", "--jobs-per-round", "16",
              "--kinds", "controller_pause", "--seed", "5", "--json", str(report_file)])
    report = json.loads(report_file.read_text())
    assert report["faults_by_kind"] == {"controller_pause": 1} and report["controller_pauses_s"] == [20.0]
    assert report["jobs_running_at_pauses"] >= run.PAUSE_WANTS_RUNNING, "the pause found jobs running"
    assert report["jobs_killed_by_pauses"] == 0 and report["requeues"] == 0, report["violation_details"]
    assert report["violations"] == 0, report["violation_details"]
