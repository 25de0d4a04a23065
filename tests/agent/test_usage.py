"""Per-job telemetry (agent/usage.py) read from real processes: their cgroups (v2 and v1) where they have
them, else psutil over their process groups; GPUs through NVML (the fake pynvml of tests/e2e)."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.agent.cgroup_hierarchies import Unified
from corral.agent.runner import JobRunner
from corral.agent.tasks import Confinement
from corral.agent.usage import GpuReader, Tracked, UsageMonitor, read_tasks
from corral.protocol import NodeStarted
from tests.agent.test_confinement import cgroup_tree, gpu_files, remove_tree, shared_dir, v1_tree  # noqa: F401

MIB = 1024 * 1024
# Holds 120 MiB (every page touched) and burns CPU until killed.
HOG = ("import time\nx = bytearray(120 << 20)\nx[::4096] = b'1' * len(x[::4096])\n"
       "open('ready', 'w').close()\nwhile True: sum(range(10000))\n")
FAKE_NVML = Path(__file__).parent.parent / "e2e" / "fake_nvml"


def wait_for(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_psutil_reads_the_memory_and_cpu_of_a_tasks_process_group(tmp_path):
    """No cgroup: the task's group leader and everything under it, through psutil."""
    proc = subprocess.Popen(["sh", "-c", f"{sys.executable} -c \"$HOG\"; true"], cwd=tmp_path,
                            env={**os.environ, "HOG": HOG}, start_new_session=True)
    try:
        wait_for(tmp_path / "ready")
        time.sleep(1.0)
        monitor = UsageMonitor(interval_s=1)
        tracked = Tracked(job_id=7, step_id=None, pgids=(proc.pid,), gpus=(), memory_leaf=None, memory_v2=False,
                          cpu_leaf=None)
        assert monitor.sample_due([(tracked, None)], now=0.0) == []  # the first sample comes a second in
        [(_, usage)] = monitor.sample_due([(tracked, None)], now=1.0)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    assert usage.samples == 1
    assert usage.max_rss_kib * 1024 >= 120 * MIB  # the python child, found under the shell
    assert usage.cpu_s >= 0.1
    assert usage.gpus == 0
    assert monitor.final(7, None) == usage
    assert monitor.final(7, None) is None  # forgotten once taken


def sample_running_job(launch, spool: Path, agent_env, confinement: Confinement) -> tuple[Tracked, tuple]:
    runner = JobRunner(launch, node_name="node1", spool_dir=spool, base_env=agent_env, confinement=confinement)

    async def drive():
        events = runner.run()
        assert isinstance(await anext(events), NodeStarted)
        await asyncio.to_thread(wait_for, Path(launch.workdir) / "ready")
        await asyncio.sleep(1.0)
        tracked = runner.tracked()
        reading = read_tasks(tracked)
        await runner.kill(9, 0)
        async for _ in events:
            pass
        return tracked, reading

    return asyncio.run(drive())


def test_cgroup_v2_gives_cpu_stat_and_the_memory_of_its_memory_hierarchy(cgroup_tree, shared_dir,  # noqa: F811
                                                                          make_launch, agent_env):
    """v2 memory.current and memory.peak where v2 has the memory controller (else the host's v1 memory)."""
    if "memory" not in cgroup_tree.controllers:
        pytest.skip(f"no memory controller here ({cgroup_tree.describe()})")
    launch = make_launch(user="root", workdir=str(shared_dir), argv=[sys.executable, "-c", HOG])
    tracked, (rss, peak, cpu_s) = sample_running_job(launch, shared_dir / "spool", agent_env,
                                                     Confinement(cgroups=cgroup_tree))
    assert tracked.memory_v2 == isinstance(cgroup_tree.memory, Unified)
    assert tracked.memory_leaf == cgroup_tree.memory.root / "job_7" / "batch"
    assert tracked.cpu_leaf == cgroup_tree.tracker.root / "job_7" / "batch"
    assert rss >= 120 * MIB
    # memory.peak is newer than some kernels (5.19): where it is missing the samples' maximum stands.
    assert peak == 0 or peak >= rss
    assert cpu_s >= 0.1


def test_cgroup_v1_memory_gives_usage_and_max_usage(v1_tree, shared_dir, make_launch, agent_env):  # noqa: F811
    if v1_tree.memory is None:
        pytest.skip(f"no v1 memory hierarchy here ({v1_tree.describe()})")
    launch = make_launch(user="root", workdir=str(shared_dir), argv=[sys.executable, "-c", HOG])
    tracked, (rss, peak, cpu_s) = sample_running_job(launch, shared_dir / "spool", agent_env,
                                                     Confinement(cgroups=v1_tree))
    assert not tracked.memory_v2 and tracked.cpu_leaf is None  # CPU time from psutil on v1
    assert rss >= 120 * MIB and peak >= rss
    assert cpu_s >= 0.1


def test_nvml_gives_the_jobs_devices_utilisation_and_memory(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(FAKE_NVML))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.setenv("FAKE_NVML_NAMES", "NVIDIA H100 80GB HBM3,NVIDIA H100 80GB HBM3,NVIDIA H100 80GB HBM3")
    monkeypatch.setenv("FAKE_NVML_UTIL", "90,2,40")
    monkeypatch.setenv("FAKE_NVML_USED_MIB", "1000,10,3000")
    monitor = UsageMonitor(interval_s=5, gpus=GpuReader())
    assert monitor.start()
    tracked = Tracked(job_id=8, step_id=0, pgids=(os.getpid(),), gpus=(0, 2), memory_leaf=None, memory_v2=False,
                      cpu_leaf=None)
    monitor.sample_due([(tracked, None)], now=0.0)
    [(_, first)] = monitor.sample_due([(tracked, None)], now=1.0)
    monkeypatch.setenv("FAKE_NVML_UTIL", "1,2,3")
    monkeypatch.setenv("FAKE_NVML_USED_MIB", "500,10,500")
    assert monitor.sample_due([(tracked, None)], now=2.0) == []  # not due before its interval
    [(_, second)] = monitor.sample_due([(tracked, 2.0)], now=7.0)  # the job's --acctg-freq is its own
    monitor.stop()
    assert (first.gpus, first.gpu_util_pct, first.max_gpu_mem_mib) == (2, 65.0, 4000)  # device 1 is not its
    assert (second.gpu_util_pct, second.max_gpu_util_pct, second.ave_gpu_util_pct) == (2.0, 65.0, 33.5)
    assert (second.max_gpu_mem_mib, second.ave_gpu_mem_mib) == (4000, 2500)
    assert second.gpu_idle_s == 6.0  # under 5 % at the sample 6 s after the last


def test_a_job_with_acctg_freq_0_is_not_sampled():
    monitor = UsageMonitor(interval_s=1)
    tracked = Tracked(job_id=9, step_id=None, pgids=(os.getpid(),), gpus=(), memory_leaf=None, memory_v2=False,
                      cpu_leaf=None)
    assert monitor.sample_due([(tracked, 0)], now=0.0) == monitor.sample_due([(tracked, 0)], now=5.0) == []
    assert monitor.final(9, None) is None
