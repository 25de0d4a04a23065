"""Pure rendering: table rows and readable fields from JobOut / NodeOut dicts (no I/O, no rich).

Times are shown in local time in Slurm's ISO form (2024-05-01T14:05:03); `now` is passed in so
output is reproducible."""
from __future__ import annotations

import time
from collections.abc import Sequence

from corral.jobscript.units import format_duration, format_duration_short

QUEUE_HEADERS = ("JOBID", "PARTITION", "NAME", "USER", "STATE", "TIME", "NODES", "GPUS", "NODELIST(REASON)")
QUEUE_RIGHT = frozenset({0, 5, 6, 7})  # numbers right-aligned, as squeue does
NODE_HEADERS = ("NODE", "STATE", "PARTITIONS", "CPUS(A/T)", "MEM(A/T)", "GPUS(A/T)", "GPU MODEL", "REASON")
NODE_RIGHT = frozenset({3, 4, 5})
ACCT_HEADERS = ("JobID", "Name", "State", "Start", "End", "Elapsed", "Nodes", "GPUs", "GPU-seconds", "ExitCode")
ACCT_RIGHT = frozenset({0, 5, 6, 7, 8, 9})
UNKNOWN_TIME = "Unknown"  # what Slurm prints for a time not reached yet


def format_timestamp(epoch: float | None) -> str:
    if epoch is None:
        return UNKNOWN_TIME
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def format_clock(epoch: float, now: float) -> str:
    """The time of day alone when it is today, else the full timestamp."""
    same_day = time.localtime(epoch)[:3] == time.localtime(now)[:3]
    return time.strftime("%H:%M:%S", time.localtime(epoch)) if same_day else format_timestamp(epoch)


def format_mib(mib: float) -> str:
    """Memory for people: 512M, 16G, 1.5T (1024-based, like Slurm's units)."""
    for unit, size in (("T", 1024 * 1024), ("G", 1024)):
        if mib >= size:
            value = mib / size
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{mib:.0f}M"


def exit_code_text(job: dict) -> str:
    return f"{job['exit_code']}:{job['exit_signal']}"


def nodelist_or_reason(job: dict, now: float) -> str:
    """squeue's NODELIST(REASON): the nodes once allocated, else `(Reason)` and any estimated start."""
    if job["nodelist"]:
        return job["nodelist"]
    text = f"({job['reason']})"
    if job.get("estimated_start") is not None:
        text += f" est. start {format_clock(job['estimated_start'], now)}"
    return text


def queue_rows(jobs: Sequence[dict], now: float) -> list[tuple[str, ...]]:
    return [
        (
            str(job["id"]), job["partition"], job["name"], job["user"], job["state"],
            format_duration_short(job["elapsed_s"]), str(job["num_nodes"]), str(job["total_gpus"]),
            nodelist_or_reason(job, now),
        )
        for job in jobs
    ]


def node_rows(nodes: Sequence[dict]) -> list[tuple[str, ...]]:
    return [
        (
            node["name"], node["state"], ",".join(node["partitions"]),
            f"{node['cpus_alloc']}/{node['cpus']}",
            f"{format_mib(node['mem_alloc_mib'])}/{format_mib(node['mem_mib'])}",
            f"{node['gpus_alloc']}/{len(node['gpus'])}", gpu_models(node), node["drain_reason"],
        )
        for node in nodes
    ]


def gpu_models(node: dict) -> str:
    """Distinct GPU models with counts, e.g. `4x NVIDIA H100`; `-` for a node without GPUs."""
    counts: dict[str, int] = {}
    for gpu in node["gpus"]:
        counts[gpu["model"]] = counts.get(gpu["model"], 0) + 1
    return ", ".join(f"{n}x {model}" for model, n in counts.items()) or "-"


def acct_rows(jobs: Sequence[dict]) -> list[tuple[str, ...]]:
    return [
        (
            str(job["id"]), job["name"], job["state"], format_timestamp(job["start_time"]),
            format_timestamp(job["end_time"]), format_duration(job["elapsed_s"]), str(job["num_nodes"]),
            str(job["total_gpus"]), f"{job['gpu_seconds']:.0f}", exit_code_text(job),
        )
        for job in jobs
    ]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                 right: frozenset[int] = frozenset()) -> list[str]:
    """Columns padded to their widest cell, two spaces apart; trailing blanks trimmed."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    lines = []
    for row in (headers, *rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines


def job_fields(job: dict) -> list[tuple[str, str]]:
    """(label, text) pairs in scontrol's spirit: identity, state, times, shape, placement, files."""
    return [
        ("JobId", str(job["id"])),
        ("JobName", job["name"]),
        ("User", job["user"]),
        ("Partition", job["partition"]),
        ("Priority", str(job["priority"])),
        ("State", job["state"]),
        ("Reason", job["reason"]),
        ("ExitCode", exit_code_text(job)),
        ("RestartCount", str(job["restart_count"])),
        *_time_fields(job),
        *_shape_fields(job),
        ("NodeList", job["nodelist"] or "(none)"),
        *_slice_fields(job),
        ("GpuSeconds", f"{job['gpu_seconds']:.0f}"),
        ("WorkDir", job["workdir"]),
        ("StdOut", job["output"]),
        ("StdErr", job["error"] or job["output"]),  # no separate file: stderr goes with stdout
    ]


def _time_fields(job: dict) -> list[tuple[str, str]]:
    fields = [
        ("SubmitTime", format_timestamp(job["submit_time"])),
        ("StartTime", format_timestamp(job["start_time"])),
        ("EndTime", format_timestamp(job["end_time"])),
    ]
    if job.get("estimated_start") is not None:
        fields.append(("EstimatedStart", format_timestamp(job["estimated_start"])))
    fields += [("TimeLimit", format_duration(job["time_limit_s"])), ("RunTime", format_duration(job["elapsed_s"]))]
    return fields


def _shape_fields(job: dict) -> list[tuple[str, str]]:
    return [
        ("NumNodes", str(job["num_nodes"])),
        ("NumTasks", str(job["num_tasks"])),
        ("TasksPerNode", str(job["tasks_per_node"])),
        ("CpusPerTask", str(job["cpus_per_task"])),
        ("GpusPerNode", str(job["gpus_per_node"])),
        ("TotalGpus", str(job["total_gpus"])),
        ("MemPerNode", format_mib(job["mem_per_node_mib"])),
    ]


def _slice_fields(job: dict) -> list[tuple[str, str]]:
    """One `Alloc[node]` line per node: its GPU indices, CPUs and memory."""
    return [
        (f"Alloc[{s['node']}]",
         f"gpus={','.join(str(g) for g in s['gpus']) or '-'} cpus={s['cpus']} mem={format_mib(s['mem_mib'])}")
        for s in job["slices"]
    ]


def format_fields(fields: list[tuple[str, str]]) -> list[str]:
    width = max((len(label) for label, _ in fields), default=0)
    return [f"{label.ljust(width)} : {text}" for label, text in fields]
