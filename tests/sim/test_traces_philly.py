from collections import Counter

import pytest

from corral.sim.traces import TraceFormatError, philly


def test_helios_window_has_the_readme_count(philly_workload):
    assert len(philly_workload) == 68_503
    assert len(philly_workload.queues()) == 11
    assert philly_workload.jobs[0].submit_s >= 0
    assert philly_workload.jobs[-1].submit_s < 61 * 86400  # Oct + Nov


def test_jobs_are_consolidated_on_8_gpu_nodes(philly_workload):
    shapes = Counter((j.num_nodes, j.gpus_per_node) for j in philly_workload.jobs)
    assert shapes == {(1, 1): 64_073, (1, 2): 1_409, (1, 4): 1_534, (1, 8): 1_301, (2, 8): 139, (3, 8): 6,
                      (4, 8): 34, (2, 6): 7}
    assert "7 job(s) of 12 GPUs shaped 2 nodes x 6 GPUs (spread evenly)" in philly_workload.notes


def test_each_vc_is_one_tenant_without_time_limits(philly_workload):
    first = philly_workload.jobs[0]
    assert first.user == first.account == first.queue
    assert all(j.time_limit_s is None for j in philly_workload.jobs)


@pytest.mark.parametrize("gpus, shape", [(1, (1, 1)), (8, (1, 8)), (12, (2, 6)), (16, (2, 8)), (20, (3, 7)),
                                         (24, (3, 8)), (32, (4, 8))])
def test_consolidated_shape(gpus, shape):
    assert philly.consolidated_shape(gpus) == shape


def test_vc_cluster_has_2816_gpus():
    cluster = philly.philly_cluster()
    assert cluster.total_gpus == 2_816
    assert cluster.queue_nodes()["6214e9"] == 64
    assert len(cluster.queue_gpus()) == 11


def _write(tmp_path, text):
    path = tmp_path / "jobs.csv"
    path.write_text(text)
    return path


def test_malformed_rows_name_file_and_line(tmp_path):
    path = _write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n"
                            "2017-10-02 00:00:00,60.0,1,60.0,vc1\n"
                            "2017-10-02 00:00:00,sixty,1,60.0,vc1\n")
    with pytest.raises(TraceFormatError, match=r"jobs\.csv:3: column 'duration': 'sixty' is not a number"):
        philly.read_philly(path, vc_path=None)


@pytest.mark.parametrize("body, message", [
    ("2017-10-02,60.0,1,60.0,vc1\n", r":2: column 'timestamp'"),
    ("2017-10-02 00:00:00,60.0,0,0,vc1\n", r":2: column 'num_gpus': 0 < 1"),
    ("2017-10-02 00:00:00,60.0,1,vc1\n", r":2: 4 fields, header has 5"),
])
def test_bad_values(tmp_path, body, message):
    path = _write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n" + body)
    with pytest.raises(TraceFormatError, match=message):
        philly.read_philly(path, vc_path=None)


def test_missing_column_is_reported(tmp_path):
    path = _write(tmp_path, "timestamp,duration,gpus,cluster\n")
    with pytest.raises(TraceFormatError, match=r":1: header lacks column\(s\) num_gpus"):
        philly.read_philly(path, vc_path=None)


def test_window_and_vc_filters(tmp_path):
    path = _write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n"
                            "2017-09-30 23:59:59,60,1,60,a\n"
                            "2017-10-01 00:00:00,60,1,60,a\n"
                            "2017-11-30 23:59:59,60,1,60,b\n"
                            "2017-12-01 00:00:00,60,1,60,a\n")
    w = philly.read_philly(path, vc_path=None)
    assert [(j.id, j.submit_s) for j in w.jobs] == [(1, 0.0), (2, 61 * 86400 - 1.0)]
    assert [j.id for j in philly.read_philly(path, vc_path=None, vcs=["b"]).jobs] == [2]
