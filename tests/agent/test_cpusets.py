"""The agent's choice of CPU ids for its jobs (the controller only gives counts)."""
from __future__ import annotations

import logging

import pytest

from corral.agent.cpusets import CpuAllocator, format_cpu_list, host_cores, parse_cpu_list


@pytest.mark.parametrize("text, cpus", [("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]), ("5", [5]), ("", []),
                                        ("0-1\n", [0, 1])])
def test_the_kernels_cpu_lists_read_and_written(text, cpus):
    assert parse_cpu_list(text) == cpus
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus
    assert format_cpu_list([11, 10, 8, 3, 2, 1, 0]) == "0-3,8,10-11"


def test_jobs_get_the_lowest_free_cpus_and_give_them_back():
    cpus = CpuAllocator([4, 5, 6, 7, 8])
    assert cpus.take(1, 2) == (4, 5)
    assert cpus.take(2, 1) == (6,)
    assert cpus.take(1, 2) == (4, 5)  # asked again (a step of job 1): the same ones
    cpus.release(1)
    assert cpus.take(3, 3) == (4, 5, 7)


def test_a_job_asking_more_than_is_free_shares_every_cpu_and_the_log_says_why(caplog):
    cpus = CpuAllocator(range(4))
    assert cpus.take(1, 3) == (0, 1, 2)
    with caplog.at_level(logging.WARNING):
        assert cpus.take(2, 2) == (0, 1, 2, 3)
    assert "job 2: 2 CPU(s) asked, 1 of the agent's 4 free: it shares all of them (0-3)" in caplog.text
    assert cpus.take(3, 1) == (3,)  # the sharing job holds none of them for itself
    cpus.release(2)
    cpus.release(1)
    assert cpus.take(4, 3) == (0, 1, 2)


def test_cpus_held_by_jobs_found_at_start_are_not_handed_out():
    cpus = CpuAllocator(range(4))
    cpus.hold(9, [1, 2, 40])  # 40: not one of the agent's
    assert cpus.take(10, 2) == (0, 3)
    cpus.release(9)
    assert cpus.take(11, 2) == (1, 2)


def test_whole_cores_go_to_one_job_where_the_count_allows():
    # Four cores of two hyperthreads each, numbered as Linux does: CPU n and n + 4 share core n.
    cpus = CpuAllocator(range(8), {cpu: cpu % 4 for cpu in range(8)})
    assert cpus.take(1, 2) == (0, 4)
    assert cpus.take(2, 3) == (1, 2, 5)  # core 1, and one thread of core 2
    assert cpus.take(3, 1) == (6,)  # the other thread of core 2: core 3 stays whole
    assert cpus.take(4, 2) == (3, 7)


def test_the_hosts_cores_are_read_from_sysfs(tmp_path):
    for cpu, (package, core) in {0: (0, 0), 1: (0, 1), 2: (0, 0), 3: (1, 0)}.items():
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{package}\n")
        (topology / "core_id").write_text(f"{core}\n")
    cores = host_cores([0, 1, 2, 3, 4], sysfs=tmp_path)
    assert cores[0] == cores[2] != cores[1] and cores[3] != cores[0]
    assert cores[4] not in (cores[0], cores[1], cores[3])  # not described: a core of its own
