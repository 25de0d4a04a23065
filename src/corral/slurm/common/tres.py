"""Trackable resources (TRES) strings and Slurm's memory units.

scontrol lists TRES in Slurm's TRES id order (cpu, mem, node, billing, gres/gpu, then gres/mps or
gres/shard for a share of one GPU); sacct sorts them by name. Billing is the CPU count (no
TRESBillingWeights). Memory that is not allocated (Slurm without CR_*_Memory, or a corral slice with
0 MiB) is left out of allocations, as Slurm does."""
from __future__ import annotations

from _collections_abc import Mapping

_MEM_UNITS = "MGTP"
_SCONTROL_ORDER = ("cpu", "mem", "node", "billing", "gres/gpu", "gres/mps", "gres/shard")


def mem_text(mib: float, *, exact: bool = False) -> str:
    """convert_num_unit from MiB: 64000 -> 62.50G, 128000 -> 125G, 512 -> 512M, 0 -> 0.

    With `exact` a value is only scaled while it divides evenly (squeue's CONVERT_NUM_UNIT_EXACT)."""
    if not mib:
        return "0"
    value, unit = float(mib), 0
    while value >= 1024 and unit + 1 < len(_MEM_UNITS) and (not exact or value % 1024 == 0):
        value /= 1024
        unit += 1
    text = f"{value:.0f}" if value == int(value) else f"{value:.2f}"
    return f"{text}{_MEM_UNITS[unit]}"


def requested(job: Mapping) -> dict[str, str]:
    """What the job asked for, whole job."""
    nodes = int(job.get("num_nodes", 1))
    cpus = int(job.get("num_tasks", 1)) * int(job.get("cpus_per_task", 1))
    tres = {"cpu": str(cpus), "mem": mem_text(int(job.get("mem_per_node_mib", 0)) * nodes),
            "node": str(nodes), "billing": str(cpus)}
    share = _share(job)
    if share:
        tres[f"gres/{share[0]}"] = str(share[1] * nodes)
        return tres
    gpus = int(job.get("total_gpus", 0) or int(job.get("gpus_per_node", 0)) * nodes)
    if gpus:
        tres["gres/gpu"] = str(gpus)
    return tres


def _share(job: Mapping) -> tuple[str, int] | None:
    """("shard", 2) for a job on shares of one GPU per node (JobOut.gpu_share "shard:2")."""
    kind, _, amount = str(job.get("gpu_share") or "").partition(":")
    return (kind, int(amount)) if amount.isdigit() else None


def allocated(job: Mapping) -> dict[str, str]:
    """What the job holds (or held), from its slices; empty before it starts."""
    slices = job.get("slices") or ()
    if not slices:
        return {}
    cpus = sum(int(s.get("cpus", 0)) for s in slices)
    mem_mib = sum(int(s.get("mem_mib", 0)) for s in slices)
    gpus = sum(len(s.get("gpus", ())) for s in slices)
    tres = {"cpu": str(cpus)}
    if mem_mib:
        tres["mem"] = mem_text(mem_mib)
    tres |= {"node": str(len(slices)), "billing": str(cpus)}
    share = _share(job)
    if share:
        tres[f"gres/{share[0]}"] = str(share[1] * len(slices))
    elif gpus:
        tres["gres/gpu"] = str(gpus)
    return tres


def scontrol_text(tres: Mapping[str, str]) -> str:
    return ",".join(f"{k}={tres[k]}" for k in _SCONTROL_ORDER if k in tres)


def sacct_text(tres: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(tres.items()))


def scontrol_job_tres(job: Mapping) -> str:
    """scontrol's TRES=: the allocation once the job started, the request before."""
    return scontrol_text(allocated(job) or requested(job))


def tres_per_node(job: Mapping) -> str | None:
    """squeue %b / scontrol TresPerNode: `gres:gpu:N` when GPUs were asked per node, `gres:shard:N` or
    `gres:mps:P` for a share of one."""
    share = _share(job)
    if share:
        return f"gres:{share[0]}:{share[1]}"
    gpus = int(job.get("gpus_per_node", 0))
    return f"gres:gpu:{gpus}" if gpus else None


def allocated_amounts(job: Mapping) -> dict[str, int]:
    """What the job holds as numbers, for sums over time (sreport, sshare's TRESRunMins): CPUs, memory
    (MiB), nodes, billing (the CPUs) and GPUs."""
    slices = job.get("slices") or ()
    cpus = sum(int(s.get("cpus", 0)) for s in slices)
    return {"cpu": cpus, "mem": sum(int(s.get("mem_mib", 0)) for s in slices), "node": len(slices),
            "billing": cpus, "gres/gpu": sum(len(s.get("gpus", ())) for s in slices)}
