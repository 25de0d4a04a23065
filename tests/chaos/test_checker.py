"""The history checker finds each kind of violation from real marker files, and none in a clean history."""
from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.chaos.checker import Incarnation, check, parse_marker, read_markers, redone
from tests.chaos.workload import SCRIPT


def marker(directory: Path, job: int, run: int, node: str, pid: int, devices: str, start: float,
           beats: list[float], end: float | None, rank: int = 0) -> None:
    lines = [f"start {job} {run} {node} {rank} {pid} {devices} {start}", *(f"beat {t}" for t in beats)]
    if end is not None:
        lines.append(f"end {end}")
    (directory / f"{job}.{run}.{rank}.{pid}.marker").write_text("\n".join(lines) + "\n")


def completed(nodes: list[str], elapsed: float) -> dict:
    return {"state": "COMPLETED", "nodes": nodes, "elapsed_s": elapsed}


def test_a_clean_history_has_no_violation(tmp_path: Path) -> None:
    marker(tmp_path, 1, 0, "node1", 10, "0,1", 100.0, [100.2, 100.4], 100.5)
    marker(tmp_path, 2, 0, "node1", 11, "0", 100.6, [100.8], 101.0)  # GPU 0 again, after job 1
    marker(tmp_path, 3, 0, "node1", 12, "2", 100.1, [100.3], None)  # killed, then requeued:
    marker(tmp_path, 3, 1, "node2", 13, "2", 101.0, [101.2], 101.4)
    records = {1: completed(["node1"], 0.6), 2: completed(["node1"], 0.5), 3: completed(["node2"], 0.5)}
    assert check([1, 2, 3], records, read_markers(tmp_path)) == []


def test_a_lost_an_unfinished_and_a_job_not_requeued_are_found(tmp_path: Path) -> None:
    records = {2: {"state": "RUNNING"}, 3: {"state": "NODE_FAIL"}, 4: {"state": "NODE_FAIL", "requeue": False}}
    found = check([1, 2, 3, 4], records, [])
    assert [(v.kind, v.job_id) for v in found] == [("lost", 1), ("not_final", 2), ("not_requeued", 3)]


def test_a_run_overlapping_the_one_before_is_found(tmp_path: Path) -> None:
    marker(tmp_path, 5, 0, "node1", 10, "0", 100.0, [100.2, 100.4, 100.6], None)
    marker(tmp_path, 5, 1, "node2", 11, "0", 100.5, [100.7], 100.8)
    kinds = [v.kind for v in check([5], {5: completed(["node2"], 0.3)}, read_markers(tmp_path))]
    assert kinds == ["twice"]


def test_work_done_again_in_a_later_run_is_counted_not_a_violation(tmp_path: Path) -> None:
    marker(tmp_path, 6, 0, "node1", 10, "0", 100.0, [], 100.2)
    marker(tmp_path, 6, 1, "node1", 11, "0", 101.0, [], 101.2)
    marker(tmp_path, 7, 0, "node1", 12, "1", 100.0, [], None)
    marker(tmp_path, 7, 1, "node1", 13, "1", 101.0, [], 101.2)
    assert check([6, 7], {6: completed(["node1"], 0.2), 7: completed(["node1"], 0.2)}, read_markers(tmp_path)) == []
    assert redone(read_markers(tmp_path)) == {6: [0, 1]}


def test_one_rank_started_twice_in_one_run_is_found(tmp_path: Path) -> None:
    marker(tmp_path, 7, 0, "node1", 10, "0", 100.0, [], 100.2)
    marker(tmp_path, 7, 0, "node2", 11, "0", 100.0, [], 100.2)  # same rank 0 elsewhere: launched twice
    found = check([7], {7: completed(["node1", "node2"], 0.2)}, read_markers(tmp_path))
    assert [v.kind for v in found] == ["twice"]


def test_a_gang_run_is_one_run(tmp_path: Path) -> None:
    marker(tmp_path, 8, 0, "node1", 10, "0", 100.0, [100.2], 100.3, rank=0)
    marker(tmp_path, 8, 0, "node2", 11, "0", 100.05, [100.25], 100.3, rank=1)
    assert check([8], {8: completed(["node1", "node2"], 0.3)}, read_markers(tmp_path)) == []


def test_a_gpu_held_by_two_jobs_at_once_is_found(tmp_path: Path) -> None:
    marker(tmp_path, 1, 0, "node1", 10, "0,1", 100.0, [100.2, 100.4], 100.5)
    marker(tmp_path, 2, 0, "node1", 11, "1", 100.3, [], 100.6)
    marker(tmp_path, 3, 0, "node2", 12, "1", 100.3, [], 100.6)  # another node's GPU 1: fine
    records = {j: completed(["node1" if j < 3 else "node2"], 1.0) for j in (1, 2, 3)}
    found = check([1, 2, 3], records, read_markers(tmp_path))
    assert [(v.kind, v.job_id) for v in found] == [("device", 2)]


def test_accounting_that_differs_from_what_ran_is_found(tmp_path: Path) -> None:
    marker(tmp_path, 1, 0, "node1", 10, "0", 100.0, [], 110.0)
    marker(tmp_path, 2, 0, "node1", 11, "1", 100.0, [], None)
    marker(tmp_path, 3, 0, "node2", 12, "1", 100.0, [], 100.5)
    records = {1: completed(["node1"], 2.0), 2: completed(["node1"], 2.0), 3: completed(["node1"], 0.5)}
    found = check([1, 2, 3], records, read_markers(tmp_path))
    assert [(v.kind, v.job_id) for v in found] == [("accounting", 1), ("accounting", 2), ("accounting", 3)]


def test_a_marker_cut_off_by_a_kill_is_read_as_far_as_it_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "9.0.0.10.marker"
    path.write_text("start 9 0 node1 0 10 0 100.0\nbeat 100.2\nbeat 100.")
    found = parse_marker(path)
    assert found is not None and found.last_seen == 100.2 and not found.finished
    (tmp_path / "9.0.0.11.marker").write_text("start 9 0 no")
    assert parse_marker(tmp_path / "9.0.0.11.marker") is None


def test_the_workload_script_writes_what_the_checker_reads(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "42", "SLURM_RESTART_COUNT": "1", "SLURMD_NODENAME": "node3",
           "SLURM_NODEID": "0", "CUDA_VISIBLE_DEVICES": "2,3"}
    subprocess.run(["bash", "-c", SCRIPT, "chaos", str(tmp_path), "2"], env=env, check=True, timeout=10)
    [found] = read_markers(tmp_path)
    seen = (found.job_id, found.restart_count, found.node, found.devices, found.finished)
    assert seen == (42, 1, "node3", (2, 3), True)
    assert 0.35 < found.last_seen - found.start < 2.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0.1, 5.0)), min_size=1, max_size=12), st.data())
def test_jobs_run_back_to_back_on_a_gpu_never_violate_and_any_overlap_is_found(jobs, data) -> None:
    """Jobs laid end to end on each GPU are clean; moving one job's start into its predecessor's run on
    the same GPU is always reported as a device violation."""
    free_at = [0.0] * 4
    runs = []
    for job_id, (device, length) in enumerate(jobs, start=1):
        start = free_at[device] + 0.01
        free_at[device] = start + length
        runs.append(Incarnation(job_id, "node1", 0, job_id, 0, (device,), start, start + length, True))
    records = {r.job_id: completed(["node1"], r.last_seen - r.start) for r in runs}
    assert check(records, records, runs) == []
    followers = [(a, b) for a in runs for b in runs if a.devices == b.devices and b.start > a.last_seen
                 and not any(c.devices == a.devices and a.last_seen < c.start < b.start for c in runs)]
    if followers:
        before, after = data.draw(st.sampled_from(followers))
        moved = before.last_seen - data.draw(st.floats(0.001, before.last_seen - before.start))
        shifted = [r if r is not after else Incarnation(r.job_id, r.node, 0, r.pid, 0, r.devices, moved,
                                                          r.last_seen, True) for r in runs]
        found = check(records, records, shifted)
        assert any(v.kind == "device" and v.job_id in (before.job_id, after.job_id) for v in found)
