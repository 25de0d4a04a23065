import json

import pytest

from corral.api.schemas import JobOut
from corral.sim.traces import TraceFormatError
from corral.sim.traces.accounting import accounting_workload, read_accounting

T0 = 1_700_000_000.0


def job_out(id: int, submit: float, start: float | None, end: float | None, **overrides) -> dict:
    record = dict(
        id=id, name=f"job{id}", user="alice", state="COMPLETED", reason="None", partition="gpu", priority=0,
        submit_time=submit, start_time=start, end_time=end, estimated_start=None, time_limit_s=3600,
        elapsed_s=0.0, num_nodes=1, tasks_per_node=1, num_tasks=1, gpus_per_node=1, cpus_per_task=1,
        mem_per_node_mib=0, total_gpus=1, nodelist="", slices=[], exit_code=0, exit_signal=0,
        gpu_seconds=0.0, workdir="/tmp", output="", error=None, restart_count=0,
    )
    record.update(overrides)
    return JobOut.model_validate(record).model_dump()


def test_finished_jobs_become_a_workload(tmp_path):
    records = [
        job_out(7, T0 + 10, T0 + 15, T0 + 115, user="bob", partition="big", num_nodes=2, gpus_per_node=4,
                tasks_per_node=2, cpus_per_task=3, mem_per_node_mib=2048, time_limit_s=600, priority=5),
        job_out(3, T0, T0 + 1, T0 + 61),
        job_out(4, T0 + 2, None, None, state="CANCELLED"),
        job_out(5, T0 + 3, T0 + 4, None, state="RUNNING"),
    ]
    path = tmp_path / "accounting.json"
    path.write_text(json.dumps(records))
    w = read_accounting(path)
    assert [j.id for j in w.jobs] == [3, 7]
    assert w.origin_epoch_s == T0
    big = w.jobs[1]
    assert (big.submit_s, big.duration_s, big.num_nodes, big.gpus_per_node, big.cpus_per_node) == (10, 100, 2, 4, 6)
    assert (big.mem_per_node_mib, big.user, big.account, big.queue, big.time_limit_s, big.priority) == (
        2048, "bob", "bob", "big", 600, 5)
    assert w.notes[1:] == ("1 job(s) skipped: never started", "1 job(s) skipped: still running at export")


def test_invalid_records_are_named():
    records = [job_out(1, T0, T0, T0 + 1), {"id": 2}]
    with pytest.raises(TraceFormatError, match=r"export: job #1: name: Field required"):
        accounting_workload(records, source="export")


def test_not_a_list_or_not_json(tmp_path):
    with pytest.raises(TraceFormatError, match="expected a JSON list"):
        accounting_workload({"jobs": []})
    path = tmp_path / "bad.json"
    path.write_text("[\n{oops")
    with pytest.raises(TraceFormatError, match=r"bad\.json:2: not JSON"):
        read_accounting(path)


def test_times_out_of_order():
    with pytest.raises(TraceFormatError, match=r"job #0 \(id 1\): times out of order"):
        accounting_workload([job_out(1, T0, T0 + 10, T0 + 5)])
