"""A job's or step's sampled usage (JobOut.usage, a step row's "usage") as sacct and sstat print it.

The agents sample per node (a job's cgroup on each node), not per task: MaxRSS is the largest node's,
AveRSS the mean over nodes, AveCPU the CPU time per task. Fields Slurm fills from data corral does not
gather (virtual memory, pages, disk I/O, energy, CPU frequency, the task holding a maximum) stay blank."""
from __future__ import annotations

from _collections_abc import Mapping

_UNITS = ("", "K", "M", "G", "T", "P")


def num_unit(value: float) -> str:
    """convert_num_unit with CONVERT_NUM_UNIT_EXACT (sacct's and sstat's default): a byte count scaled by
    1024 while it stays a multiple of 512, as in `MaxRSS 1104K`."""
    unit = 0
    while value >= 1024 and value % 512 == 0 and unit + 1 < len(_UNITS):
        value /= 1024
        unit += 1
    text = f"{value:.0f}" if value == int(value) else f"{value:.2f}"
    return f"{text}{_UNITS[unit]}"


def cpu_time(seconds: float, subseconds: bool = True) -> str:
    """sacct's _elapsed_time: `MM:SS.mmm` under an hour (with `subseconds`), `HH:MM:SS`, `DD-HH:MM:SS`."""
    whole = int(seconds)
    millis = int(round((seconds - whole) * 1000)) if subseconds else 0
    if millis >= 1000:
        whole, millis = whole + 1, 0
    days, hours, minutes, secs = whole // 86400, whole // 3600 % 24, whole // 60 % 60, whole % 60
    if days:
        return f"{days:02d}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours:02d}:{minutes:02d}:{secs:02d}"
    if millis:
        return f"{minutes:02d}:{secs:02d}.{millis:03d}"
    return f"00:{minutes:02d}:{secs:02d}"


def _clock(seconds: float) -> str:
    """secs2time_str, as TRES strings print cpu: `HH:MM:SS`, `D-HH:MM:SS`."""
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    text = f"{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def _tres(usage: Mapping, cpu_s: float, mem_kib: int, gpu_mem_mib: int, gpu_util: float) -> str:
    """TRESUsageIn* text, TRES sorted by name as sacct prints them: cpu, gres/gpumem, gres/gpuutil, mem."""
    parts = [f"cpu={_clock(cpu_s)}"]
    if usage.get("gpus"):
        parts += [f"gres/gpumem={num_unit(gpu_mem_mib * 1024 * 1024)}", f"gres/gpuutil={round(gpu_util)}"]
    parts.append(f"mem={num_unit(mem_kib * 1024)}")
    return ",".join(parts)


def field(name: str, usage: Mapping | None, num_tasks: int) -> str | None:
    """The text of usage field `name` (None: blank, or not a usage field corral fills)."""
    if not usage or not usage.get("samples"):
        return None
    nodes = max(1, int(usage.get("nodes", 1)))
    cpu_s = float(usage["cpu_s"])
    if name == "MaxRSS":
        return num_unit(usage["max_rss_kib"] * 1024)
    if name == "MaxRSSNode":
        return str(usage.get("max_rss_node", ""))
    if name == "AveRSS":
        return num_unit(usage["ave_rss_kib"] * 1024)
    if name == "AveCPU":
        return cpu_time(cpu_s / max(1, num_tasks), subseconds=False)
    if name == "TotalCPU":
        return cpu_time(cpu_s)
    if name == "TRESUsageInMax":
        return _tres(usage, cpu_s, usage["max_rss_kib"], usage["max_gpu_mem_mib"], usage["max_gpu_util_pct"])
    if name == "TRESUsageInAve":
        return _tres(usage, cpu_s / nodes, usage["ave_rss_kib"], usage["ave_gpu_mem_mib"] // nodes,
                     usage["ave_gpu_util_pct"])
    return None


FIELDS = ("MaxRSS", "MaxRSSNode", "AveRSS", "AveCPU", "TotalCPU", "TRESUsageInMax", "TRESUsageInAve")
