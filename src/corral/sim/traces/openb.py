"""Alibaba's "openb" GPU-sharing trace (cluster-trace-gpu-v2023, the FGD paper's workload).

Nodes (`openb_node_list_*.csv`): `sn,cpu_milli,memory_mib,gpu,model`. Pods
(`openb_pod_list_*.csv.gz`): `name,cpu_milli,memory_mib,num_gpu,gpu_milli` and, in most lists,
`gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time` (seconds from the trace start).

A pod is a one-node job: `num_gpu` GPUs of `gpu_milli` each (a fraction of one GPU when < 1000),
`cpu_milli` (kept exactly; `cpus_per_node` is it rounded up to whole CPUs), `gpu_spec` as the GPU model
constraint ("A|B": any of them). queue = the pod's QoS class (LS, BE, ...); user = account = "openb".
The FGD experiment's arrival procedure (sampling, inflation, shuffling) is in `corral.sim.traces.fgd`.
"""
from __future__ import annotations

import math
import os

from corral.sim.traces._csv import TRACES_DIR, Row, iter_rows
from corral.sim.workload import Cluster, NodeSpec, TraceJob, Workload

OPENB_DIR = TRACES_DIR / "alibaba-gpu-v2023" / "csv"
GPU_NODES_PATH = OPENB_DIR / "openb_node_list_gpu_node.csv"
ALL_NODES_PATH = OPENB_DIR / "openb_node_list_all_node.csv"
POD_LISTS = ("default", "cpu050", "gpushare40", "multigpu20", "gpuspec10")

_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


def pod_list_path(variant: str = "default") -> os.PathLike[str]:
    if variant not in POD_LISTS:
        raise ValueError(f"unknown openb pod list {variant!r}; have {', '.join(POD_LISTS)}")
    return OPENB_DIR / f"openb_pod_list_{variant}.csv.gz"


def read_nodes(path: str | os.PathLike[str] = GPU_NODES_PATH) -> Cluster:
    """The nodes as one shared pool (no queues); CPU capacity kept exactly in `cpu_milli`."""
    nodes = []
    for row in iter_rows(path, _NODE_COLUMNS):
        cpu_milli = row.integer("cpu_milli")
        gpus = row.integer("gpu")
        model = row.text("model") or None
        if gpus > 0 and model is None:
            raise row.error("a GPU node without a 'model'")
        nodes.append(NodeSpec(row.text("sn"), gpus, cpu_milli // 1000, row.integer("memory_mib"),
                              model, None, cpu_milli))
    names = {n.name for n in nodes}
    if len(names) != len(nodes):
        raise ValueError(f"{path}: node names ('sn') are not unique")
    return Cluster("openb", tuple(nodes), source=f"{path}: Alibaba openb nodes")


def read_pods(path: str | os.PathLike[str] | None = None) -> Workload:
    """All pods of a pod list as one-node jobs. Job ids are the 0-based data-row index.

    submit_s = creation_time; duration_s = deletion_time - scheduled_time (creation_time for pods that
    were never scheduled: their deletion ends a wait, not a run). Lists without times (multigpu20)
    get submit_s = duration_s = 0 — the FGD experiment ignores time anyway.
    """
    path = path if path is not None else pod_list_path()
    jobs = []
    for index, row in enumerate(iter_rows(path, _POD_COLUMNS)):
        jobs.append(pod_job(row, index))
    names = {j.name for j in jobs}
    if len(names) != len(jobs):
        raise ValueError(f"{path}: pod names are not unique")
    notes = ("one pod = one single-node job; queue = QoS class; cpus rounded up, exact cpu_milli kept",)
    return Workload(tuple(jobs), f"openb-{_variant(path)}", f"{path}: Alibaba openb pods", 0.0, notes)


def pod_job(row: Row, index: int) -> TraceJob:
    """One pod record as a `TraceJob` (shared by the FGD arrival builder)."""
    num_gpu = row.integer("num_gpu")
    gpu_milli = row.integer("gpu_milli")
    if num_gpu == 0 and gpu_milli != 0:
        raise row.error(f"gpu_milli {gpu_milli} on a pod with no GPU")
    if num_gpu > 1 and gpu_milli != 1000:
        raise row.error(f"a {num_gpu}-GPU pod with a fractional share ({gpu_milli} milli)")
    if num_gpu == 1 and not 0 < gpu_milli <= 1000:
        raise row.error(f"gpu_milli {gpu_milli} outside 1..1000")
    cpu_milli = row.integer("cpu_milli")
    submit_s, duration_s = _times(row)
    qos = row.text("qos") if "qos" in row.values else ""
    return TraceJob(
        id=index, submit_s=submit_s, duration_s=duration_s, num_nodes=1, gpus_per_node=num_gpu,
        gpu_milli=gpu_milli if num_gpu else 0, cpus_per_node=math.ceil(cpu_milli / 1000),
        mem_per_node_mib=row.integer("memory_mib"),
        gpu_model=(row.text("gpu_spec") or None) if "gpu_spec" in row.values else None,
        user="openb", account="openb", queue=qos or "default", time_limit_s=None,
        name=row.text("name"), cpu_milli_per_node=cpu_milli,
    )


def _times(row: Row) -> tuple[float, float]:
    if "creation_time" not in row.values:
        return 0.0, 0.0
    created = row.number("creation_time")
    deleted = row.number("deletion_time")
    started = row.number("scheduled_time") if row.text("scheduled_time") else created
    if not created <= started <= deleted:
        raise row.error(f"times out of order: created {created}, scheduled {started}, deleted {deleted}")
    return created, deleted - started


def _variant(path: str | os.PathLike[str]) -> str:
    name = os.path.basename(str(path))
    for suffix in (".csv.gz", ".csv"):
        name = name.removesuffix(suffix)
    return name.removeprefix("openb_pod_list_")
