"""`corral simulate` as a user runs it: errors in one line, progress in logs, openb on another pod list."""
from __future__ import annotations

import json
import subprocess
import sysconfig
from pathlib import Path

import pytest

from corral.cli.simulate import TraceName
from corral.sim.cli import TRACES
from corral.sim.traces import fgd
from corral.sim.workload import Workload

from .builders import FIXTURES, job, needs

CORRAL = Path(sysconfig.get_path("scripts")) / "corral"
SACCT = FIXTURES / "sacct_slurm2205.txt"


def simulate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CORRAL), "simulate", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("args", "message"), [
    (["--trace-file", "/nonexistent"], "corral: error: /nonexistent: No such file or directory\n"),
    (["--trace", "sacct"], "corral: error: --trace sacct needs --trace-file\n"),
    (["--trace", "sacct", "--trace-file", "/etc/hostname"], "corral: error: /etc/hostname:1: header lacks JobID"),
    (["--trace", "openb", "--seeds", "51-42"], "corral: error: invalid seeds '51-42': '51-42' is not N or N-M"),
    (["--trace", "openb", "--policy", "backfill-isolated"],
     "corral: error: unknown policy 'backfill-isolated' (this trace's: fgd+cpu, fgd, bestfit)\n"),
])
def test_bad_input_is_one_line_not_a_traceback(args, message):
    result = simulate(*args)
    assert result.returncode == 1
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == ""


def test_unknown_trace_lists_every_trace():
    result = simulate("--trace", "alibaba")
    assert result.returncode == 2
    assert "'alibaba' is not one of 'philly', 'bluewaters', 'accounting', 'sacct', 'openb'" in result.stderr
    assert "Traceback" not in result.stderr


def test_trace_choices_are_the_simulators():
    from typing import get_args

    assert get_args(TraceName) == TRACES


def test_progress_into_a_log_is_plain_lines():
    result = simulate("--trace", "sacct", "--trace-file", str(SACCT))
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr
    lines = result.stderr.splitlines()
    assert all(line.startswith("backfill-isolated: ") for line in lines)
    assert sum("7/7 (100.0%)" in line for line in lines) == 1
    assert json.loads(result.stdout)["jobs"] == 7


def write_pods(path: Path, names: list[str]) -> Path:
    rows = [f"{name},4000,8192,1,{500 if i % 2 else 1000}" for i, name in enumerate(names)]
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "\n".join(rows) + "\n")
    return path


def write_nodes(path: Path, count: int) -> Path:
    rows = [f"node-{i},32000,262144,2,V100M16" for i in range(count)]
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "\n".join(rows) + "\n")
    return path


def test_seed_42_on_another_pod_list_runs_the_seeded_order_and_says_so(tmp_path):
    needs(fgd.GOLDEN_PATH)
    pods = write_pods(tmp_path / "my_pods.csv", [f"pod-{i}" for i in range(6)])
    nodes = write_nodes(tmp_path / "my_nodes.csv", 3)
    report = tmp_path / "openb.html"
    result = simulate("--trace", "openb", "--openb-pods", str(pods), "--openb-nodes", str(nodes), "--seeds", "42",
                      "--policy", "bestfit", "--report", str(report))
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("corral: note: seed 42: the FGD authors' recorded arrival order is of their "
                                    "default pod list, and pod 'openb-pod-0255' is not in the pod list 'openb-my_pods'")
    assert "seed 42 ran the seeded procedure (numpy PCG64) instead" in result.stderr
    row = json.loads(result.stdout)["experiments"][0]
    assert row["per_seed"][0]["seed"] == 42 and row["per_seed"][0]["arrivals"] > 6  # inflated to 130 %
    assert len(row["notes"]) == 1 and row["notes"][0] in result.stderr
    assert "seed 42 ran the seeded procedure" in row["setup"]
    assert "seed 42 ran the seeded procedure" in report.read_text()


def test_only_the_default_pod_list_replays_the_recorded_order(openb_pods):
    needs(fgd.GOLDEN_PATH)
    capacity = 6_212_000
    golden = fgd.sequence(openb_pods, capacity, fgd.GOLDEN_SEED)
    assert "golden" in golden.method and golden.fallback == ""
    more = Workload((*openb_pods.jobs, job(99_999, name="extra-pod")), "openb-more", "test")
    seeded = fgd.sequence(more, capacity, fgd.GOLDEN_SEED)  # every recorded pod is there, but so is another
    assert "PCG64 seed 42" in seeded.method
    assert "has 8153 pods, the recorded order 8152" in seeded.fallback
    assert fgd.sequence(more, capacity, 43).fallback == ""


def test_bluewaters_replays_with_the_users_own_limits(tmp_path):
    trace = tmp_path / "bw.csv"
    trace.write_text("u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status\n"
                     "0,1,0,64,2,0,100,3600,Pass\n1,2,4,0,4,10,50,60,Pass\n2,1,0,64,40,10,7200,3600,Killed\n")
    result = simulate("--trace", "bluewaters", "--trace-file", str(trace))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["jobs"] == 3
