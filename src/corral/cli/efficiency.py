"""seff's efficiency figures for `corral show`, from what the agents sampled (JobOut.usage and its steps'):
CPU time against the core-walltime the job held, its largest node's memory against its memory per node,
and the utilisation of its GPUs; a job the controller flagged for GPUs idle for long (its gpu_idle_flag_s)
says so."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral.durations import format_duration


def _parts(job: Mapping) -> list[Mapping]:
    """Every sampled part of the job: its own tasks and each srun step (its batch step row is its own)."""
    steps = [s.get("usage") for s in job.get("steps") or () if s.get("step_id") != "batch"]
    return [u for u in [job.get("usage"), *steps] if u and u.get("samples")]


def efficiency_fields(job: Mapping) -> list[tuple[str, str]]:
    parts = _parts(job)
    if not parts:
        return [("Efficiency", "(not sampled yet)" if job.get("start_time") else "(not started)")]
    cpu_s = sum(float(u["cpu_s"]) for u in parts)
    cores = sum(int(s.get("cpus", 0)) for s in job.get("slices") or ())
    walltime = float(job.get("elapsed_s") or 0) * cores
    fields = [("CPUUtilized", format_duration(cpu_s)),
              ("CPUEfficiency", f"{_percent(cpu_s, walltime)} of {format_duration(walltime)} core-walltime")]
    max_rss_mib = max(int(u["max_rss_kib"]) for u in parts) / 1024
    limit = int(job.get("mem_per_node_mib") or 0)
    fields += [("MemUtilized", f"{max_rss_mib:.2f} MiB (largest node)"),
               ("MemEfficiency", f"{_percent(max_rss_mib, limit)} of {limit} MiB per node" if limit
                else "(no memory limit)")]
    with_gpus = [u for u in parts if u.get("gpus")]
    if with_gpus:
        samples = sum(int(u["samples"]) for u in with_gpus)
        average = sum(float(u["ave_gpu_util_pct"]) * int(u["samples"]) for u in with_gpus) / samples
        peak = max(float(u["max_gpu_util_pct"]) for u in with_gpus)
        idle_s = min(float(u["gpu_idle_s"]) for u in with_gpus)
        fields += [("GpuUtilization", f"{average:.1f}% average, {peak:.1f}% peak"),
                   ("GpuMemUtilized", f"{max(int(u['max_gpu_mem_mib']) for u in with_gpus)} MiB")]
        if job.get("gpu_idle_flagged"):
            fields.append(("GpuIdle", f"IDLE: its GPUs have stayed under 5% for {format_duration(idle_s)}"))
    interval = max(float(u.get("interval_s", 0)) for u in parts)
    fields.append(("Sampled", f"{sum(int(u['samples']) for u in parts)} samples, every {interval:g}s"))
    return fields


def goodput_line(jobs: Sequence[Mapping]) -> str | None:
    """The fleet's goodput over these jobs (see goodput); None when no job held a GPU."""
    used, held, sampled, unsampled = goodput(jobs)
    if not sampled and not unsampled:
        return None
    figure = f"{_percent(used, held)} of {held:.0f} GPU-seconds used" if sampled else "unknown"
    return (f"Goodput: {figure} ({sampled} GPU job(s) sampled"
            + (f", {unsampled} not sampled)" if unsampled else ")"))


def goodput(jobs: Sequence[Mapping]) -> tuple[float, float, int, int]:
    """GPU-seconds used (each job's mean GPU utilisation times the GPU-seconds it held) and GPU-seconds
    allocated, over the jobs whose GPUs were sampled; how many GPU jobs were sampled, and how many not."""
    used = held = 0.0
    sampled = unsampled = 0
    for job in jobs:
        if not job.get("gpu_seconds"):
            continue
        with_gpus = [u for u in _parts(job) if u.get("gpus")]
        if not with_gpus:
            unsampled += 1
            continue
        samples = sum(int(u["samples"]) for u in with_gpus)
        average = sum(float(u["ave_gpu_util_pct"]) * int(u["samples"]) for u in with_gpus) / samples
        used += average / 100 * float(job["gpu_seconds"])
        held += float(job["gpu_seconds"])
        sampled += 1
    return used, held, sampled, unsampled


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.2f}%" if whole > 0 else "-"
