"""`corral simulate` end to end on a slice of the Philly trace: the same engine, three policies."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from corral.sim.experiment import Policy, run_experiment
from corral.sim.workload import Cluster, TraceJob, Workload

pytestmark = pytest.mark.slow


def test_simulate_command_writes_metrics_and_a_report(tmp_path: Path) -> None:
    report = tmp_path / "r.html"
    out = subprocess.run([sys.executable, "-m", "corral.cli.main", "simulate", "--max-jobs", "300",
                          "--policy", "fifo-isolated", "--policy", "backfill-cohort", "--report", str(report),
                          "--no-progress"], capture_output=True, text=True, timeout=300, check=True)
    summary = json.loads(out.stdout)
    assert summary["jobs"] == 300 and summary["gpus"] == 2816
    names = [e["name"] for e in summary["experiments"]]
    assert names == ["fifo-isolated", "backfill-cohort"]
    assert all(e["unfinished"] == 0 and e["avg_jct_s"] > 0 for e in summary["experiments"])
    page = report.read_text()
    assert "data:image/png;base64," in page and "fifo-isolated" in page


def _job(i: int, at: float, gpus: int, duration: float, limit: int) -> TraceJob:
    return TraceJob(id=i, submit_s=at, duration_s=duration, num_nodes=1, gpus_per_node=gpus, gpu_milli=1000,
                    cpus_per_node=1, mem_per_node_mib=0, gpu_model=None, user="u", account="vc", queue="vc",
                    time_limit_s=limit)


def test_backfill_lets_short_jobs_past_a_blocked_gang_fifo_does_not() -> None:
    jobs = (_job(0, 0, 4, 3600, 3600), _job(1, 1, 8, 3600, 3600)) + tuple(
        _job(i, 1 + i, 1, 600, 900) for i in range(2, 22))
    workload = Workload(jobs, name="blocked-head", source="synthetic")
    cluster = Cluster.uniform("one", {"vc": 1}, gpus_per_node=8, cpus_per_node=64, mem_per_node_mib=512_000)
    fifo = run_experiment(cluster, workload, Policy("fifo", True, False, weight_age=0))
    backfill = run_experiment(cluster, workload, Policy("backfill", True, True))
    starts = {policy: {r.job.id: r.start_s for r in o.results} for policy, o in (("fifo", fifo), ("bf", backfill))}
    assert starts["fifo"][1] == starts["bf"][1] == 3600, "the 8-GPU job starts when the first one ends, either way"
    assert all(starts["fifo"][i] >= 7200 for i in range(2, 22)), "FIFO: short jobs wait behind the head"
    assert all(starts["bf"][i] < 3600 for i in range(2, 22)), "backfill: they run in the gap, delaying nothing"
    assert backfill.metrics.overall.jct_s.mean < fifo.metrics.overall.jct_s.mean
