"""SenseTime Helios (2020) cluster shapes: GPUs per virtual cluster (VC) per day for Venus and Earth,
and the per-cluster summary statistics (real-system reference points).

`<Cluster>_cluster_gpu_number.csv` has `date,<vc>...,total`; every count is a multiple of 8 (Helios
nodes have 8 GPUs), so a day's row becomes partitions of whole 8-GPU nodes.
"""
from __future__ import annotations

import os

from corral.sim.traces._csv import TRACES_DIR, iter_rows
from corral.sim.workload import Cluster

HELIOS_DIR = TRACES_DIR / "helios"
SUMMARY_PATH = HELIOS_DIR / "helios_cluster_summary.csv"
GPUS_PER_NODE = 8
# Node CPU and memory are not in these files; generous values so GPUs are what binds.
NODE_CPUS = 64
NODE_MEM_MIB = 512 * 1024


def gpu_number_path(cluster: str) -> os.PathLike[str]:
    """The per-day VC GPU file of `cluster` ("Venus" or "Earth")."""
    return HELIOS_DIR / f"{cluster}_cluster_gpu_number.csv"


def vc_gpu_history(path: str | os.PathLike[str]) -> list[tuple[str, dict[str, int]]]:
    """[(date, {vc: gpus})] for every day in the file, checking each row's total."""
    history = []
    for row in iter_rows(path, ("date", "total")):
        vcs = {name: row.integer(name) for name in row.values if name not in ("date", "total")}
        if sum(vcs.values()) != row.integer("total"):
            raise row.error(f"VC GPUs add up to {sum(vcs.values())}, 'total' says {row.integer('total')}")
        history.append((row.text("date"), vcs))
    return history


def read_vc_gpus(path: str | os.PathLike[str], date: str | None = None) -> dict[str, int]:
    """{vc: gpus} on `date` (default: the last day in the file), leaving out VCs with no GPUs."""
    history = vc_gpu_history(path)
    if not history:
        raise ValueError(f"{path}: no data rows")
    if date is None:
        chosen = history[-1][1]
    else:
        by_date = dict(history)
        if date not in by_date:
            raise ValueError(f"{path}: no row for date {date!r} (have {history[0][0]} .. {history[-1][0]})")
        chosen = by_date[date]
    return {vc: gpus for vc, gpus in chosen.items() if gpus > 0}


def helios_cluster(cluster: str, date: str | None = None, *, path: str | os.PathLike[str] | None = None,
                   cpus_per_node: int = NODE_CPUS, mem_per_node_mib: int = NODE_MEM_MIB) -> Cluster:
    """Venus or Earth on one day: each VC a partition of 8-GPU nodes."""
    source_path = path if path is not None else gpu_number_path(cluster)
    vc_gpus = read_vc_gpus(source_path, date)
    uneven = [vc for vc, gpus in vc_gpus.items() if gpus % GPUS_PER_NODE]
    if uneven:
        raise ValueError(f"{source_path}: VC(s) {', '.join(uneven)} not a multiple of {GPUS_PER_NODE} GPUs")
    nodes = {vc: gpus // GPUS_PER_NODE for vc, gpus in vc_gpus.items()}
    day = date or "last day"
    return Cluster.uniform(cluster.lower(), nodes, gpus_per_node=GPUS_PER_NODE, cpus_per_node=cpus_per_node,
                           mem_per_node_mib=mem_per_node_mib, source=f"{source_path}: VC GPUs on {day}")


def read_cluster_summary(path: str | os.PathLike[str] = SUMMARY_PATH) -> dict[str, dict[str, float]]:
    """{cluster id: {statistic: value}} from `helios_cluster_summary.csv` (times in seconds)."""
    out: dict[str, dict[str, float]] = {}
    for row in iter_rows(path, ("id", "gpu_num", "job_num")):
        out[row.text("id")] = {k: row.number(k, minimum=None) for k in row.values if k != "id"}
    return out
