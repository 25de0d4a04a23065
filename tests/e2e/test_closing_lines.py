"""End to end: a job's output ends with slurmstepd's line when corral kills it, as real Slurm's does
(time limit, cancel, requeue), written by the first node's agent, steps (srun) included."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.e2e.harness import API, wait_for

pytestmark = pytest.mark.slow

STAMP = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)"


def closing(entity: str, node: str, due: str = "") -> re.Pattern:
    return re.compile(rf"slurmstepd: error: \*\*\* {entity} ON {node} CANCELLED AT {STAMP}{due} \*\*\*")


def stamped(text: str, pattern: re.Pattern, since: float) -> None:
    """`pattern` matches exactly one line of `text`, at a local time between `since` and now."""
    found = [m for m in map(pattern.fullmatch, text.splitlines()) if m]
    assert len(found) == 1, f"{pattern.pattern} once in:\n{text}"
    at = time.mktime(time.strptime(found[0].group(1), "%Y-%m-%dT%H:%M:%S"))
    assert since - 1 <= at <= time.time() + 1, text


def wait_file(path: Path) -> None:
    wait_for(path.exists, timeout_s=30, message=f"{path.name} written")


def test_cancel_time_limit_and_requeue_end_the_output_as_slurm_does(cluster, tmp_path) -> None:
    since = time.time()
    # Cancelled, with a step (srun -l): the step's line reaches srun's stderr labelled with its rank,
    # the job's goes to the batch step's stderr, here a separate --error file.
    cancelled = cluster.submit(script=f"#!/bin/sh\necho start\nsrun -l sh -c 'touch {tmp_path}/a; exec sleep 60'\n",
                               batch=True, output="a-%j.out", error="a-%j.err")
    # Over its time limit: a two-node batch job with a two-node step, stderr in the output file.
    timed_out = cluster.submit(script=f"#!/bin/sh\necho start\nsrun sh -c 'touch {tmp_path}/b-$SLURM_NODEID; "
                                      f"exec sleep 60'\n", batch=True, nodes=2, output="b-%j.out")
    # A command job's tasks on two nodes, one output file per rank: only the first node writes.
    tasks = cluster.submit(argv=["sh", "-c", f"touch {tmp_path}/c-$SLURM_PROCID; exec sleep 60"], nodes=2,
                           output="c-%j-%t.out", time_limit_s=3)
    for marker in ("a", "b-0", "b-1", "c-0", "c-1"):
        wait_file(tmp_path / marker)
    assert cluster.http.post(f"{API}/jobs/{cancelled}/cancel").status_code == 200
    # Shorten the limit once the step runs: the next tick finds the job past it.
    assert cluster.http.post(f"{API}/jobs/{timed_out}/update", json={"time_limit_s": 1}).status_code == 200
    assert cluster.wait_state(cancelled, "CANCELLED")["state"] == "CANCELLED"
    assert cluster.wait_state(timed_out, "TIMEOUT")["state"] == "TIMEOUT"
    assert cluster.wait_state(tasks, "TIMEOUT")["state"] == "TIMEOUT"

    assert (tmp_path / f"a-{cancelled}.out").read_text() == "start\n"
    err = (tmp_path / f"a-{cancelled}.err").read_text()
    node = cluster.job(cancelled)["nodelist"]
    stamped(err, closing(f"JOB {cancelled}", node), since)
    stamped(err, re.compile(rf"0: slurmstepd: error: \*\*\* STEP {cancelled}\.0 ON {node} CANCELLED AT {STAMP} \*\*\*"),
            since)

    out = (tmp_path / f"b-{timed_out}.out").read_text()
    assert out.startswith("start\n")
    stamped(out, closing(f"JOB {timed_out}", "node1", " DUE TO TIME LIMIT"), since)
    stamped(out, closing(rf"STEP {timed_out}\.0", "node1", " DUE TO TIME LIMIT"), since)
    assert "ON node2" not in out, "only the first node of the step writes its line"

    stamped((tmp_path / f"c-{tasks}-0.out").read_text(), closing(f"JOB {tasks}", "node1", " DUE TO TIME LIMIT"),
            since)
    assert (tmp_path / f"c-{tasks}-1.out").read_text() == ""


def test_a_requeued_job_says_so(cluster, tmp_path) -> None:
    since = time.time()
    script = (f"#!/bin/sh\necho run ${{SLURM_RESTART_COUNT:-0}}\n"
              f"[ -n \"$SLURM_RESTART_COUNT\" ] && exit 0\ntouch {tmp_path}/r\nexec sleep 60\n")
    job_id = cluster.submit(script=script, batch=True, output="r-%j.out", open_mode="append")
    wait_file(tmp_path / "r")
    assert cluster.http.post(f"{API}/jobs/{job_id}/requeue").status_code == 200
    cluster.wait_state(job_id, "COMPLETED", timeout_s=40)
    lines = (tmp_path / f"r-{job_id}.out").read_text().splitlines()
    assert lines[0] == "run 0" and lines[-1] == "run 1", lines
    # A one-node job may land on either idle node (they register in either order): the line names it.
    stamped("\n".join(lines), closing(f"JOB {job_id}", "node[12]", " DUE TO JOB REQUEUE"), since)

