"""Per-job telemetry (Slurm's jobacct_gather): what each job's and step's tasks use on this node.

Every `interval_s` (Slurm's JobAcctGatherFrequency, 30 s by default; a job's --acctg-freq=task=N or N
overrides it, never below MIN_INTERVAL_S) the agent reads, for each running job and step:

- memory and CPU from its cgroup leaf where it has one: v2 memory.current (and memory.peak, the kernel's
  own maximum, which catches peaks between two samples), cpu.stat usage_usec; v1 memory.usage_in_bytes and
  memory.max_usage_in_bytes; CPU time from psutil on v1 (corral opens no cpuacct hierarchy);
- else from psutil over its task process groups: the RSS of every process in them and their CPU times,
  with the children they waited for;
- the utilisation and used memory of the GPUs it holds, from NVML (device-wide: a job holds its devices
  whole; a share of one device reports the device's figures).

Each job keeps a few running aggregates (last, max, mean), never a time series: memory is bounded by the
number of running jobs. The agent sends the latest aggregates as a UsageReport (live: sstat, corral show)
and the final ones with NodeFinished / StepFinished (sacct's MaxRSS, AveCPU, TRESUsageIn*).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import psutil

from corral.protocol import Usage

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 30.0
MIN_INTERVAL_S = 1.0
# A GPU under this utilisation (percent, mean over the job's devices) counts as idle (Usage.gpu_idle_s).
GPU_IDLE_PCT = 5.0
KIB = 1024
MIB = 1024 * 1024


class Tracked(NamedTuple):
    """Where one job's or step's tasks are, for sampling (LocalTasks.tracked())."""

    job_id: int
    step_id: int | None
    pgids: tuple[int, ...]  # each task's process group
    gpus: tuple[int, ...]  # node-local device indices
    memory_leaf: Path | None  # its leaf in the memory hierarchy (None: no memory controller)
    memory_v2: bool
    cpu_leaf: Path | None  # its leaf in the cgroup v2 tree (cpu.stat), None without v2


class Reading(NamedTuple):
    rss_bytes: int
    peak_bytes: int  # the kernel's maximum since the leaf was made (0: not known)
    cpu_s: float
    gpu_util_pct: float | None  # mean over the devices; None: no device sampled
    gpu_mem_bytes: int


@dataclass(slots=True)
class Aggregate:
    """Running aggregates of one job's or step's readings (bounded: a handful of numbers)."""

    interval_s: float
    samples: int = 0
    rss_bytes: int = 0
    max_rss_bytes: int = 0
    rss_sum: float = 0.0
    cpu_s: float = 0.0
    gpus: int = 0
    gpu_util: float = 0.0
    max_gpu_util: float = 0.0
    gpu_util_sum: float = 0.0
    max_gpu_mem: int = 0
    gpu_mem_sum: float = 0.0
    gpu_idle_s: float = 0.0
    next_due: float = 0.0
    last_at: float | None = None  # when the last sample was taken

    def add(self, reading: Reading, gpus: int, elapsed_s: float) -> None:
        self.samples += 1
        self.rss_bytes = reading.rss_bytes
        self.max_rss_bytes = max(self.max_rss_bytes, reading.rss_bytes, reading.peak_bytes)
        self.rss_sum += reading.rss_bytes
        self.cpu_s = max(self.cpu_s, reading.cpu_s)  # cumulative: a process that exited keeps its share
        if reading.gpu_util_pct is not None:
            self.gpus = gpus
            self.gpu_util = reading.gpu_util_pct
            self.max_gpu_util = max(self.max_gpu_util, reading.gpu_util_pct)
            self.gpu_util_sum += reading.gpu_util_pct
            self.max_gpu_mem = max(self.max_gpu_mem, reading.gpu_mem_bytes)
            self.gpu_mem_sum += reading.gpu_mem_bytes
            self.gpu_idle_s = self.gpu_idle_s + elapsed_s if reading.gpu_util_pct < GPU_IDLE_PCT else 0.0

    def report(self) -> Usage:
        n = max(1, self.samples)
        return Usage(
            samples=self.samples, interval_s=self.interval_s, rss_kib=self.rss_bytes // KIB,
            max_rss_kib=self.max_rss_bytes // KIB, ave_rss_kib=int(self.rss_sum / n) // KIB,
            cpu_s=round(self.cpu_s, 3), gpus=self.gpus, gpu_util_pct=round(self.gpu_util, 1),
            max_gpu_util_pct=round(self.max_gpu_util, 1), ave_gpu_util_pct=round(self.gpu_util_sum / n, 1),
            max_gpu_mem_mib=self.max_gpu_mem // MIB, ave_gpu_mem_mib=int(self.gpu_mem_sum / n) // MIB,
            gpu_idle_s=round(self.gpu_idle_s, 1))


class GpuReader:
    """Device utilisation and used memory through NVML (nvidia-ml-py), opened once by `start()`."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: dict[int, Any] = {}

    def start(self) -> None:
        import pynvml  # only GPU nodes get here: discovery found NVML already

        pynvml.nvmlInit()
        self._nvml = pynvml

    def stop(self) -> None:
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml = None

    def read(self, indices: Sequence[int]) -> tuple[float, int] | None:
        """(mean utilisation %, used bytes summed) over the devices; None without NVML or devices."""
        nvml = self._nvml
        if nvml is None or not indices:
            return None
        try:
            utils, used = [], 0
            for index in indices:
                handle = self._handles.get(index)
                if handle is None:
                    handle = self._handles[index] = nvml.nvmlDeviceGetHandleByIndex(index)
                utils.append(float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
                used += int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
        except nvml.NVMLError as exc:
            log.warning("NVML could not read GPUs %s: %s", list(indices), exc)
            return None
        return sum(utils) / len(utils), used


def read_tasks(tracked: Tracked) -> tuple[int, int, float]:
    """(RSS bytes, peak bytes or 0, CPU seconds) of one job's or step's tasks."""
    rss = peak = 0
    cpu_s: float | None = None
    if tracked.memory_leaf is not None:
        leaf = tracked.memory_leaf
        if tracked.memory_v2:
            rss, peak = _read_int(leaf / "memory.current"), _read_int(leaf / "memory.peak")
        else:
            rss, peak = _read_int(leaf / "memory.usage_in_bytes"), _read_int(leaf / "memory.max_usage_in_bytes")
    if tracked.cpu_leaf is not None:
        cpu_s = _cpu_stat_s(tracked.cpu_leaf)
    if tracked.memory_leaf is None or cpu_s is None:
        ps_rss, ps_cpu = _read_groups(tracked.pgids)
        rss = rss if tracked.memory_leaf is not None else ps_rss
        cpu_s = ps_cpu if cpu_s is None else cpu_s
    return rss, peak, cpu_s


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _cpu_stat_s(leaf: Path) -> float | None:
    try:
        for line in (leaf / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
    except (OSError, ValueError):
        return None
    return None


def _read_groups(pgids: Sequence[int]) -> tuple[int, float]:
    """RSS and CPU time of every process descending from the tasks' group leaders (a task's main process
    leads its own group), with the CPU time of the children they waited for."""
    rss, cpu_s = 0, 0.0
    for pgid in pgids:
        try:
            leader = psutil.Process(pgid)
            family = [leader, *leader.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in family:
            try:
                with proc.oneshot():
                    rss += proc.memory_info().rss
                    times = proc.cpu_times()
            except psutil.Error:
                continue
            cpu_s += times.user + times.system + times.children_user + times.children_system
    return rss, cpu_s


class UsageMonitor:
    """The aggregates of every job and step running here, keyed (job id, step id or None)."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, gpus: GpuReader | None = None) -> None:
        self.interval_s = max(MIN_INTERVAL_S, interval_s)
        self._gpus = gpus
        self._aggregates: dict[tuple[int, int | None], Aggregate] = {}

    def start(self) -> bool:
        """Open NVML (blocking); whether there is anything to stop. A node whose NVML went away since
        discovery samples CPU and memory only, and says so."""
        if self._gpus is None:
            return False
        try:
            self._gpus.start()
        except Exception as exc:  # NVMLError or ImportError: pynvml's errors have no common base
            log.warning("GPU utilisation is not sampled: NVML cannot be opened (%s)", exc)
            self._gpus = None
            return False
        return True

    def stop(self) -> None:
        if self._gpus is not None:
            self._gpus.stop()

    def sample_due(self, targets: Sequence[tuple[Tracked, float | None]], now: float) -> list[tuple[Tracked, Usage]]:
        """Read the targets whose interval has passed (each with its own --acctg-freq, or None for the
        agent's, 0 for never); forget those no longer given. Blocking (files, /proc, NVML): call in a thread."""
        live = {(t.job_id, t.step_id) for t, _ in targets}
        for key in [k for k in self._aggregates if k not in live]:
            del self._aggregates[key]
        reports = []
        for tracked, interval_s in targets:
            if interval_s == 0:
                continue  # --acctg-freq=task=0: not sampled
            key = (tracked.job_id, tracked.step_id)
            every = self.interval_s if interval_s is None else max(MIN_INTERVAL_S, interval_s)
            aggregate = self._aggregates.get(key)
            if aggregate is None:
                # The first sample comes one second after the start: short jobs are seen too.
                aggregate = self._aggregates[key] = Aggregate(every, next_due=now + MIN_INTERVAL_S)
            if now < aggregate.next_due:
                continue
            self._sample(tracked, aggregate, now)
            aggregate.next_due = now + every
            reports.append((tracked, aggregate.report()))
        return reports

    def final(self, job_id: int, step_id: int | None) -> Usage | None:
        """The aggregates of a job or step whose tasks have ended, forgotten here; None if never sampled."""
        aggregate = self._aggregates.pop((job_id, step_id), None)
        return aggregate.report() if aggregate is not None and aggregate.samples else None

    def _sample(self, tracked: Tracked, aggregate: Aggregate, now: float) -> None:
        rss, peak, cpu_s = read_tasks(tracked)
        gpu = self._gpus.read(tracked.gpus) if self._gpus is not None else None
        reading = Reading(rss, peak, cpu_s, gpu[0] if gpu else None, gpu[1] if gpu else 0)
        aggregate.add(reading, len(tracked.gpus), 0.0 if aggregate.last_at is None else now - aggregate.last_at)
        aggregate.last_at = now
