"""Table tests for the small formatters: times, job ids, states, TRES, memory, records."""
from __future__ import annotations

import calendar
import time

import pytest

from corral.jobscript import units
from corral.slurm.common import jobids, records, states, timefmt, tres
from corral.slurm.common.record import Record

NOON = calendar.timegm((2026, 11, 22, 12, 0, 0))  # UTC, the zone conftest.py sets


@pytest.mark.parametrize(("seconds", "long_form", "short_form"), [
    (0, "00:00:00", "0:00"), (59, "00:00:59", "0:59"), (61, "00:01:01", "1:01"), (3600, "01:00:00", "1:00:00"),
    (86399, "23:59:59", "23:59:59"), (86400, "1-00:00:00", "1-00:00:00"), (90061, "1-01:01:01", "1-01:01:01"),
    (12 * 86400, "12-00:00:00", "12-00:00:00"),
])
def test_durations(seconds, long_form, short_form):
    assert timefmt.elapsed(seconds) == long_form
    assert timefmt.squeue_duration(seconds) == short_form
    # the local copies stay equal to corral.jobscript.units (see timefmt.py for why they exist)
    assert (timefmt.format_duration(seconds), timefmt.format_duration_short(seconds)) == (
        units.format_duration(seconds), units.format_duration_short(seconds))


def test_short_durations_are_remembered_by_the_second_and_never_more_than_the_bound():
    """A 100,000-job listing formats the same durations again and again: each whole second's text is kept, the
    same as computed afresh, a fraction of a second giving its second's text, and the memory bounded."""
    from corral import durations

    for seconds in (*range(0, 3 * durations._SHORT_TEXTS_MAX, 7), 59.9, 0.5, 86_400.99, 3_599):
        assert durations.format_duration_short(seconds) == durations._short_text(int(seconds))
        assert len(durations._SHORT_TEXTS) <= durations._SHORT_TEXTS_MAX
    assert durations.format_duration_short(59.9) is durations.format_duration_short(59)
    assert durations.format_duration_short(-5) == "0:00"


@pytest.mark.parametrize(("seconds", "text"), [(-1, "INVALID"), (366 * 86400, "INVALID"), (None, "UNLIMITED")])
def test_squeue_limits(seconds, text):
    assert timefmt.squeue_time_limit(seconds) == text


def test_time_limits_and_unset_values():
    assert timefmt.time_limit(None) == "UNLIMITED"
    assert timefmt.time_limit(600) == "00:10:00"
    assert timefmt.elapsed(None) == "UNLIMITED"


@pytest.mark.parametrize(("epoch", "fmt", "text"), [
    (NOON, None, "2026-11-22T12:00:00"), (NOON, "standard", "2026-11-22T12:00:00"), (NOON, "%H:%M", "12:00"),
    (NOON, "relative", "12:00:00"), (NOON - 86400, "relative", "Ystday 12:00"),
    (NOON + 86400, "relative", "Tomorr 12:00"),
    (NOON - 3 * 86400, "relative", time.strftime("%a 12:00", time.gmtime(NOON - 3 * 86400))),
    (NOON - 30 * 86400, "relative", "23 Oct 12:00"), (NOON - 400 * 86400, "relative", "18 Oct 2025"),
    (None, None, "Unknown"), (0, None, "Unknown"),
])
def test_timestamps(epoch, fmt, text):
    assert timefmt.make_time_str(epoch, NOON, fmt) == text


def test_ctime_banner():
    assert timefmt.ctime(NOON) == "Sun Nov 22 12:00:00 2026"


@pytest.mark.parametrize(("job", "job_id", "raw", "array_id", "task"), [
    ({"id": 7}, "7", "7", "7", "N/A"),
    ({"id": 9, "array_job_id": 5, "array_task_id": 3}, "5_3", "9", "5", "3"),
    ({"id": 5, "array_job_id": 5, "array_task_spec": "5-9%2"}, "5_[5-9%2]", "5", "5", "5-9%2"),
    ({"id": 5, "array_job_id": 5, "array_task_spec": "1,3,5-7"}, "5_[1,3,5-7]", "5", "5", "1,3,5-7"),
])
def test_job_ids(job, job_id, raw, array_id, task):
    assert (jobids.job_id(job), jobids.raw_job_id(job), jobids.array_job_id(job), jobids.array_task_id(job)) == (
        job_id, raw, array_id, task)


def test_step_ids():
    job = {"id": 9, "array_job_id": 5, "array_task_id": 3}
    assert jobids.step_id(job, {"step_id": "batch"}) == "5_3.batch"
    assert jobids.step_id(job, {"step_id": "0"}, raw=True) == "9.0"


@pytest.mark.parametrize(("ids", "throttle", "text"), [
    ([2, 3, 4, 5], 2, "2-5%2"), ([1, 3, 5, 6, 7], None, "1,3,5-7"), ([0], None, "0"), ([4, 2, 3, 3], None, "2-4"),
])
def test_task_ranges(ids, throttle, text):
    assert jobids.format_task_ranges(ids, throttle) == text


@pytest.mark.parametrize(("spec", "ids", "throttle"), [
    ("0-9%2", list(range(10)), 2), ("1,3,5-7", [1, 3, 5, 6, 7], None), ("0-15:4", [0, 4, 8, 12], None),
    ("3", [3], None),
])
def test_task_specs(spec, ids, throttle):
    assert jobids.parse_task_spec(spec) == (ids, throttle)


@pytest.mark.parametrize("spec", ["abc", "5-2", "0-2000", "1-3%x", "1-3:0", "", "1,,2", "-1"])
def test_bad_task_specs(spec):
    with pytest.raises(ValueError):
        jobids.parse_task_spec(spec)


@pytest.mark.parametrize(("state", "compact"), [
    ("PENDING", "PD"), ("RUNNING", "R"), ("COMPLETING", "CG"), ("COMPLETED", "CD"), ("CANCELLED", "CA"),
    ("FAILED", "F"), ("TIMEOUT", "TO"), ("NODE_FAIL", "NF"), ("OUT_OF_MEMORY", "OOM"), ("PREEMPTED", "PR"),
    ("REQUEUED", "RQ"), ("BOOT_FAIL", "BF"), ("DEADLINE", "DL"), ("SUSPENDED", "S"),
])
def test_job_state_codes(state, compact):
    assert states.job_state_compact({"state": state}) == compact
    assert states.parse_job_state(compact.lower()) == state
    assert states.parse_job_state(state.title()) == state


def test_sacct_state_names_the_canceller():
    assert states.sacct_state({"state": "CANCELLED", "cancelled_by_uid": 0}) == "CANCELLED by 0"
    assert states.sacct_state({"state": "CANCELLED"}) == "CANCELLED"
    assert states.parse_job_state("bogus") is None


@pytest.mark.parametrize(("node", "compact", "long_name", "scontrol"), [
    ({"state": "idle"}, "idle", "idle", "IDLE"),
    ({"state": "mixed"}, "mix", "mixed", "MIXED"),
    ({"state": "allocated"}, "alloc", "allocated", "ALLOCATED"),
    ({"state": "draining", "cpus": 8, "cpus_alloc": 2}, "drng", "draining", "MIXED+DRAIN"),
    ({"state": "draining", "cpus": 8, "cpus_alloc": 8}, "drng", "draining", "ALLOCATED+DRAIN"),
    ({"state": "drained"}, "drain", "drained", "IDLE+DRAIN"),
    ({"state": "down"}, "down*", "down*", "DOWN+NOT_RESPONDING"),
])
def test_node_states(node, compact, long_name, scontrol):
    assert (states.node_state_compact(node), states.node_state_long(node), states.node_state_scontrol(node)) == (
        compact, long_name, scontrol)


@pytest.mark.parametrize(("mib", "text", "exact"), [
    (0, "0", "0"), (512, "512M", "512M"), (1024, "1G", "1G"), (64000, "62.50G", "64000M"), (128000, "125G", "125G"),
    (256000, "250G", "250G"), (1536, "1.50G", "1536M"), (1024 * 1024, "1T", "1T"),
])
def test_memory_units(mib, text, exact):
    assert tres.mem_text(mib) == text
    assert tres.mem_text(mib, exact=True) == exact


def test_tres_strings():
    job = {"num_nodes": 2, "num_tasks": 2, "cpus_per_task": 1, "mem_per_node_mib": 64000, "gpus_per_node": 2,
           "total_gpus": 4, "slices": [{"node": "n1", "cpus": 1, "gpus": [0, 1], "mem_mib": 0},
                                       {"node": "n2", "cpus": 1, "gpus": [0, 1], "mem_mib": 0}]}
    assert tres.sacct_text(tres.requested(job)) == "billing=2,cpu=2,gres/gpu=4,mem=125G,node=2"
    assert tres.sacct_text(tres.allocated(job)) == "billing=2,cpu=2,gres/gpu=4,node=2"
    assert tres.scontrol_job_tres(job) == "cpu=2,node=2,billing=2,gres/gpu=4"
    assert tres.scontrol_job_tres({**job, "slices": []}) == "cpu=2,mem=125G,node=2,billing=2,gres/gpu=4"
    assert tres.tres_per_node(job) == "gres:gpu:2"


def test_tres_of_a_share_of_one_gpu():
    # --gres=shard:2 on two nodes: Slurm counts the shards, not the GPUs they are on.
    job = {"num_nodes": 2, "num_tasks": 2, "cpus_per_task": 1, "mem_per_node_mib": 0, "gpus_per_node": 1,
           "total_gpus": 2, "gpu_share": "shard:2",
           "slices": [{"cpus": 1, "gpus": [0], "gpu_milli": 250}, {"cpus": 1, "gpus": [3], "gpu_milli": 250}]}
    assert tres.scontrol_job_tres(job) == "cpu=2,node=2,billing=2,gres/shard=4"
    assert tres.scontrol_job_tres({**job, "slices": []}) == "cpu=2,mem=0,node=2,billing=2,gres/shard=4"
    assert tres.sacct_text(tres.requested(job)) == "billing=2,cpu=2,gres/shard=4,mem=0,node=2"
    assert tres.tres_per_node(job) == "gres:shard:2"
    assert tres.tres_per_node({**job, "gpu_share": "mps:50"}) == "gres:mps:50"
    assert tres.tres_per_node({"gpus_per_node": 0}) is None


def test_record_defaults_for_fields_the_api_does_not_send_yet():
    job = {"id": 1, "state": "RUNNING", "start_time": 100.0}
    assert records.get(job, "account") == "" and records.get(job, "steps") == ()
    assert records.get({**job, "account": "lab"}, "account") == "lab"
    assert records.time_used_s(job, now=160.0) == 60
    assert records.time_used_s({**job, "state": "COMPLETED", "end_time": 130.0}, now=999.0) == 30
    assert records.time_used_s({"id": 2, "state": "PENDING"}, now=999.0) == 0
    assert records.num_cpus({"num_tasks": 4, "cpus_per_task": 2}) == 8
    assert records.group_name({"user": "ada"}) == "ada"


class Point(Record):
    x: int
    y: int = 0


def test_record_class():
    point = Point(1)
    assert point == Point(x=1, y=0) and point != Point(1, 2)
    assert point.replace(y=5) == Point(1, 5)
    assert repr(point) == "Point(x=1, y=0)"
    with pytest.raises(AttributeError):
        point.x = 3
    with pytest.raises(TypeError):
        Point()
    with pytest.raises(TypeError):
        Point(1, z=2)
