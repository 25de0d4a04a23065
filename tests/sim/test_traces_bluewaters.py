from collections import Counter

import pytest

from corral.sim.traces import TraceFormatError
from corral.sim.traces.bluewaters import JOBS_PATH, UNITS_PER_NODE, bluewaters_cluster, fit_to, read_bluewaters

needs_trace = pytest.mark.skipif(not JOBS_PATH.exists(), reason=f"{JOBS_PATH} not here")

HEADER = "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status\n"


@pytest.fixture(scope="module")
def bluewaters():
    return read_bluewaters()


@needs_trace
def test_the_readme_counts(bluewaters):
    assert len(bluewaters) == 15_000
    assert len({j.user for j in bluewaters.jobs}) == 149
    assert Counter(j.queue for j in bluewaters.jobs) == {"xe": 11_597, "xk": 3_403}
    assert 86 * 86400 < bluewaters.jobs[-1].submit_s < 87 * 86400  # 86.5 days of submission gaps


@needs_trace
def test_every_job_keeps_its_users_limit_and_runs_at_most_that(bluewaters):
    assert all(j.time_limit_s and 0 <= j.duration_s <= j.time_limit_s for j in bluewaters.jobs)
    assert "1939 runtime(s) past the time limit cut at the limit" in bluewaters.notes
    assert all(j.user == j.account for j in bluewaters.jobs)


def test_a_job_of_n_nodes_gets_n_units_or_a_few_more_on_the_fewest_simulated_nodes(tmp_path):
    path = tmp_path / "bw.csv"
    path.write_text(HEADER + "0,7,0,64,2,0,100,3600,Pass\n1,7,40,0,40,5,7200,3600,Killed\n2,8,0,64,64,5,1,60,Pass\n")
    jobs = {j.id: j for j in read_bluewaters(path).jobs}
    assert (jobs[0].num_nodes, jobs[0].gpus_per_node, jobs[0].queue, jobs[0].user) == (1, 2, "xe", "bw7")
    assert (jobs[1].num_nodes, jobs[1].gpus_per_node, jobs[1].queue) == (2, 20, "xk")
    assert jobs[1].duration_s == 3600 and jobs[1].submit_s == 5  # cut at its limit; gaps add up
    assert (jobs[2].num_nodes, jobs[2].gpus_per_node, jobs[2].submit_s) == (2, 32, 10)


def test_a_job_larger_than_its_partition_is_clamped_and_said_so(tmp_path):
    path = tmp_path / "bw.csv"
    path.write_text(HEADER + "0,1,0,64,100,0,10,60,Pass\n1,1,0,64,5000,0,10,60,Pass\n")
    cluster = bluewaters_cluster(xe_units=2 * UNITS_PER_NODE, xk_units=UNITS_PER_NODE)
    fitted = {j.id: j for j in fit_to(read_bluewaters(path), cluster).jobs}
    assert fitted[0].total_gpus == fitted[1].total_gpus == 64
    assert "2 job(s) larger than their partition ({'xe': 64, 'xk': 32}) clamped to it" in \
        fit_to(read_bluewaters(path), cluster).notes


def test_a_bad_record_names_its_line(tmp_path):
    path = tmp_path / "bw.csv"
    path.write_text(HEADER + "0,1,0,64,2,0,100,3600,Pass\n1,1,0,64,0,0,100,3600,Pass\n")
    with pytest.raises(TraceFormatError, match=r"bw.csv:3: column 'node_num': 0 < 1"):
        read_bluewaters(path)


def test_a_partition_must_be_whole_simulated_nodes():
    with pytest.raises(ValueError, match="xe_units=100: must be a positive multiple of 32"):
        bluewaters_cluster(xe_units=100)
