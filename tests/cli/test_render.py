import time

import pytest

from corral.cli import render

from .standin import T0, canned_jobs, canned_nodes, make_job


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_queue_rows():
    jobs = canned_jobs()
    rows = render.queue_rows([jobs[1], jobs[2]], now=T0)
    assert rows[0] == ("1", "gpu", "train", "alice", "RUNNING", "5:03", "2", "8", "node[1-2]")
    assert rows[1] == ("2", "gpu", "big", "bob", "PENDING", "0:00", "1", "16", "(Resources) est. start 23:13:20")


@pytest.mark.parametrize(
    ("overrides", "text"),
    [
        ({"reason": "Priority"}, "(Priority)"),
        ({"reason": "Resources", "estimated_start": T0 + 2 * 86400}, "(Resources) est. start 2023-11-16T22:13:20"),
        ({"state": "RUNNING", "nodelist": "node[1-4]"}, "node[1-4]"),
        ({"state": "CANCELLED", "reason": "None"}, "(None)"),
    ],
)
def test_nodelist_or_reason(overrides, text):
    assert render.nodelist_or_reason(make_job(9, **overrides), now=T0) == text


def test_node_rows():
    rows = render.node_rows(canned_nodes())
    assert rows[0] == ("node1", "allocated", "gpu", "8/16", "16G/64G", "4/4", "4x sim-gpu", "")
    assert rows[1] == ("node2", "drained", "gpu,debug", "0/16", "0M/64G", "0/0", "-", "bad fan")


def test_acct_rows():
    jobs = canned_jobs()
    assert render.acct_rows([jobs[3], jobs[2]]) == [
        ("3", "old", "COMPLETED", "2023-11-14T20:13:20", "2023-11-14T21:13:20", "01:00:00", "1", "1", "3600", "0:0"),
        ("2", "big", "PENDING", "Unknown", "Unknown", "00:00:00", "1", "16", "0", "0:0"),
    ]


@pytest.mark.parametrize(("mib", "text"), [(0, "0M"), (512, "512M"), (1024, "1G"), (1536, "1.5G"),
                                           (16384, "16G"), (1024 * 1024, "1T"), (3 * 1024 * 1024 // 2, "1.5T")])
def test_format_mib(mib, text):
    assert render.format_mib(mib) == text


def test_format_table_aligns_and_trims():
    rows = [("1", "a", "10"), ("123", "long-name", "2")]
    lines = render.format_table(("ID", "NAME", "N"), rows, right=frozenset({0, 2}))
    assert lines == [" ID  NAME        N", "  1  a          10", "123  long-name   2"]


def test_format_table_empty():
    assert render.format_table(("A", "BB"), []) == ["A  BB"]


def test_job_fields_cover_every_jobout_field():
    job = canned_jobs()[1]
    fields = dict(render.job_fields(job))
    assert fields["SubmitTime"] == "2023-11-14T22:13:20"
    assert fields["StartTime"] == "2023-11-14T22:13:30"
    assert fields["MemPerNode"] == "16G" and fields["TotalGpus"] == "8" and fields["GpuSeconds"] == "2424"
    assert "EstimatedStart" not in fields
    # Every JobOut field shows up under some label (slices as Alloc[...] lines).
    covered = {"id", "name", "user", "state", "reason", "partition", "priority", "submit_time", "start_time",
               "end_time", "estimated_start", "time_limit_s", "elapsed_s", "num_nodes", "tasks_per_node",
               "num_tasks", "gpus_per_node", "cpus_per_task", "mem_per_node_mib", "total_gpus", "nodelist", "slices",
               "exit_code", "exit_signal", "gpu_seconds", "workdir", "output", "error", "restart_count"}
    assert covered == set(job)
    assert fields["Alloc[node2]"] == "gpus=0,1,2,3 cpus=8 mem=16G"
    pending = dict(render.job_fields(canned_jobs()[2]))
    assert pending["EstimatedStart"] == "2023-11-14T23:13:20" and pending["NodeList"] == "(none)"


def test_format_fields():
    assert render.format_fields([("A", "1"), ("Long", "x")]) == ["A    : 1", "Long : x"]
