"""`corral advise` against a real controller and agent: jobs run, then its figures are checked against the
cluster's own accounting, and its replay of them runs every job."""
from __future__ import annotations

import json
import time

import pytest

from tests.e2e.harness import API
from tests.slurm.commands import Commands

pytestmark = pytest.mark.slow

TENANCY = {"accounts": [{"name": "lab"}], "users": [{"name": "tester", "accounts": ["lab"]}],
           "queues": [{"name": "labq", "accounts": ["lab"], "nominal": {"gpu": 2}}]}


def test_advise_reports_the_clusters_own_history_and_replays_it(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(nodes=1, gpus=2)
    cmd = Commands(cluster, tmp_path)
    empty = cmd("corral", "advise")
    assert empty.code == 1 and empty.stderr.startswith("corral: error: no finished jobs since "), empty
    bad = cmd("corral", "advise", "--since", "last tuesday")
    assert bad.code == 1 and bad.stderr.startswith("corral: error: invalid time 'last tuesday'"), bad
    assert cluster.http.put(f"{API}/tenancy", json=TENANCY).status_code == 200
    # The scheduler settings the replay's baseline is built with.
    assert cluster.http.get(f"{API}/scheduler").json() == {
        "placement": "bestfit", "backfill": True, "max_reservations": 8, "max_jobs_considered": None,
        "fgd_cpu_weight": 0.3, "task_mix": []}

    # Three jobs of both GPUs at once: they run one after the other.
    started = time.time()
    ids = [cluster.submit(argv=["sleep", "1"], gpus=2, time_limit_s=600) for _ in range(3)]
    for job_id in ids:
        cluster.wait_state(job_id, "COMPLETED")
    result = cmd("corral", "advise", "--json", "--since", "1h")
    assert result.code == 0, result
    report = json.loads(result.stdout)
    # The cluster is minutes old: the hour before it began counts for nothing (it once made the
    # utilisation "0.1 of 1,344 GPU-hours").
    created_at = cluster.http.get(f"{API}/health").json()["created_at"]
    assert created_at > time.time() - 600
    period = report["summary"]["period"]
    assert period["since"] == created_at
    assert report["summary"]["utilisation"]["capacity_gpu_hours"] == pytest.approx(
        2 * (period["until"] - created_at) / 3600, abs=0.006)

    records = cluster.http.get(f"{API}/accounting", params={"since": started - 60}).json()
    assert sorted(r["id"] for r in records) == ids
    waits = [r["start_time"] - r["submit_time"] for r in records]
    held_h = sum(2 * (r["end_time"] - r["start_time"]) for r in records) / 3600
    summary = report["summary"]
    assert (summary["period"]["jobs"], summary["period"]["finished"], summary["period"]["gpus"]) == (3, 3, 2)
    assert summary["waits"]["overall"]["jobs"] == 3
    assert summary["waits"]["overall"]["mean_s"] == pytest.approx(sum(waits) / 3, abs=0.06)
    assert summary["mix"]["by_size"] == [{"name": "2-4", "jobs": 3, "gpu_hours": round(held_h, 2),
                                          "median_runtime_s": pytest.approx(summary["mix"]["by_size"][0]
                                                                            ["median_runtime_s"])}]
    assert summary["utilisation"]["gpu_hours"] == pytest.approx(held_h, abs=0.006)
    [queue] = summary["queues"]
    assert (queue["name"], queue["nominal_gpus"], queue["peak_gpus"]) == ("labq", 2, 2)

    scenarios = {row["key"]: row for row in report["whatif"]["scenarios"]}
    assert report["whatif"]["evidence"]["jobs"] == 3
    assert scenarios["actual"]["jobs"] == 3
    assert scenarios["actual"]["mean_wait_s"] == pytest.approx(sum(waits) / 3, abs=0.06)
    assert scenarios["baseline"]["jobs"] == 3
    assert (scenarios["baseline"]["refused"], scenarios["baseline"]["unfinished"]) == (0, 0)
    assert "fgd" in scenarios and "lending" not in scenarios  # one queue: nothing to lend between
    assert report["recommendations"] == []  # waits of seconds: nothing worth changing

    text = cmd("corral", "advise", "--since", "1h")
    assert text.code == 0 and "baseline: the live configuration replayed" in text.stdout, text
    assert "nothing to change" in text.stdout
