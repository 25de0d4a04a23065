"""What this node offers: GPUs (from NVML, or simulated on request), CPUs and memory.

Simulation is never a silent fallback: a node that was meant to expose real GPUs but cannot reach the
driver must fail loudly, or the cluster would schedule GPU jobs onto devices that do not exist.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import psutil

from corral.protocol import GpuInfo

log = logging.getLogger(__name__)

SIM_GPU_MODEL = "sim-gpu"
SIM_GPU_MEMORY_MIB = 81920
MIB = 1024 * 1024


class DiscoveryError(RuntimeError):
    """The node's resources could not be determined."""


@dataclass(frozen=True)
class Inventory:
    gpus: list[GpuInfo]
    cpus: int
    mem_mib: int
    source: Literal["nvml", "simulated"]
    device_files: tuple[str, ...] = ()  # per GPU, its /dev/nvidiaN (NVML's minor number); none when simulated


def discover(sim_gpus: int | None, cpus: int | None = None, mem_mib: int | None = None) -> Inventory:
    """Inventory of this node. `sim_gpus=None` reads real GPUs through NVML; an int simulates that many.

    `cpus`/`mem_mib` override what psutil reports: several agents often share one host in tests and demos,
    and each must advertise only its share.
    """
    source: Literal["nvml", "simulated"]
    device_files: tuple[str, ...] = ()
    if sim_gpus is None:
        (gpus, device_files), source = nvml_gpus(), "nvml"
    else:
        gpus, source = simulated_gpus(sim_gpus), "simulated"
    return Inventory(
        gpus=gpus,
        cpus=cpus if cpus is not None else (psutil.cpu_count(logical=True) or 1),
        mem_mib=mem_mib if mem_mib is not None else psutil.virtual_memory().total // MIB,
        source=source,
        device_files=device_files,
    )


def simulated_gpus(count: int) -> list[GpuInfo]:
    """`count` fake devices in two NVLink islands (first half nvl0, second half nvl1).

    Two islands let placement code exercise its topology preference without real hardware.
    """
    if count < 0:
        raise DiscoveryError(f"cannot simulate a negative number of GPUs ({count})")
    half = (count + 1) // 2  # an odd count puts the extra device in nvl0
    return [
        GpuInfo(
            index=i,
            model=SIM_GPU_MODEL,
            memory_mib=SIM_GPU_MEMORY_MIB,
            domain="nvl0" if i < half else "nvl1",
            uuid=f"SIM-{i}",
        )
        for i in range(count)
    ]


def group_domains(n: int, linked_pairs: Iterable[tuple[int, int]], prefix: str = "nvl") -> list[str]:
    """Domain name for each of `n` GPUs, given which pairs are linked (union-find).

    Ids >= n are switches, not GPUs: linking GPUs 0 and 1 to switch 8 puts them in one domain, which is how
    NVSwitch systems (every GPU links to a switch, none to another GPU) become a single island. Domains are
    numbered in order of their lowest GPU index, so the result is stable for a given topology.
    """
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]  # path halving keeps the trees flat
            x = parent[x]
        return x

    for a, b in linked_pairs:
        root_a, root_b = find(a), find(b)
        if root_a != root_b:
            parent[max(root_a, root_b)] = min(root_a, root_b)
    names: dict[int, str] = {}
    domains: list[str] = []
    for gpu in range(n):
        root = find(gpu)
        if root not in names:
            names[root] = f"{prefix}{len(names)}"
        domains.append(names[root])
    return domains


def nvml_gpus() -> tuple[list[GpuInfo], tuple[str, ...]]:
    """Real devices through NVML (nvidia-ml-py), with their NVLink/PCIe topology domains; and their device
    files (/dev/nvidia<minor number>, which the cgroup devices controller denies to jobs not holding them)."""
    nvml = _load_nvml()
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        domains = _nvml_domains(nvml, handles)
        gpus = [_nvml_gpu_info(nvml, i, handle, domains[i]) for i, handle in enumerate(handles)]
        return gpus, _nvml_device_files(nvml, handles)
    except nvml.NVMLError as exc:
        raise DiscoveryError(f"NVML query failed: {exc}") from exc
    finally:
        nvml.nvmlShutdown()


def _load_nvml() -> Any:
    hint = "pass --gpus N to simulate N devices (or --gpus 0 for a CPU-only node)"
    try:
        import pynvml  # lazily: importing is cheap, but only GPU nodes need it
    except ImportError as exc:
        raise DiscoveryError(f"nvidia-ml-py is not installed ({exc}); {hint}") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise DiscoveryError(f"cannot initialise NVML ({exc}): is the NVIDIA driver loaded? {hint}") from exc
    return pynvml


def _nvml_device_files(nvml: Any, handles: list[Any]) -> tuple[str, ...]:
    """/dev/nvidia<minor> of each device; none at all if NVML cannot give one of them (a partial list would
    let jobs open the devices left out)."""
    try:
        return tuple(f"/dev/nvidia{nvml.nvmlDeviceGetMinorNumber(handle)}" for handle in handles)
    except nvml.NVMLError as exc:
        log.warning("NVML gives no device minor number (%s): jobs' access to other GPUs is not limited", exc)
        return ()


def _nvml_gpu_info(nvml: Any, index: int, handle: Any, domain: str | None) -> GpuInfo:
    return GpuInfo(
        index=index,
        model=_text(nvml.nvmlDeviceGetName(handle)),
        memory_mib=nvml.nvmlDeviceGetMemoryInfo(handle).total // MIB,
        domain=domain,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
    )


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py releases return bytes.
    return value.decode() if isinstance(value, bytes) else value


def _nvml_domains(nvml: Any, handles: list[Any]) -> list[str | None]:
    """NVLink islands when any NVLink is active, else GPUs sharing a PCIe switch, else unknown (None)."""
    n = len(handles)
    nvlink_pairs = _nvlink_pairs(nvml, handles)
    if nvlink_pairs:
        return list(group_domains(n, nvlink_pairs, prefix="nvl"))
    pcie_pairs = _pcie_switch_pairs(nvml, handles)
    if pcie_pairs is None:
        return [None] * n
    return list(group_domains(n, pcie_pairs, prefix="pci"))


def _pci_key(pci: Any) -> tuple[int, int, int]:
    # Compare numeric fields: busId strings differ in padding between the device and NvLink queries.
    return (pci.domain, pci.bus, pci.device)


def _nvlink_pairs(nvml: Any, handles: list[Any]) -> list[tuple[int, int]]:
    """(gpu, peer) for every active link; a peer that is not one of our GPUs gets an id >= len(handles)."""
    gpu_by_pci = {_pci_key(nvml.nvmlDeviceGetPciInfo(h)): i for i, h in enumerate(handles)}
    other_ids: dict[tuple[int, int, int], int] = {}
    pairs: list[tuple[int, int]] = []
    for i, handle in enumerate(handles):
        for remote in _active_link_peers(nvml, handle):
            peer = gpu_by_pci.get(remote)
            if peer is None:  # an NVSwitch (or CPU NPU): a shared hub joins its GPUs
                peer = other_ids.setdefault(remote, len(handles) + len(other_ids))
            pairs.append((i, peer))
    return pairs


def _active_link_peers(nvml: Any, handle: Any) -> list[tuple[int, int, int]]:
    peers: list[tuple[int, int, int]] = []
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            peers.append(_pci_key(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)))
        except nvml.NVMLError:
            # NotSupported / InvalidArgument: no NVLink on this device, or past its last link.
            break
    return peers


def _pcie_switch_pairs(nvml: Any, handles: list[Any]) -> list[tuple[int, int]] | None:
    """Pairs whose closest common ancestor is at most a PCIe switch tree; None if NVML cannot tell."""
    pairs: list[tuple[int, int]] = []
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            try:
                level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
            except nvml.NVMLError:
                return None
            if level <= nvml.NVML_TOPOLOGY_MULTIPLE:
                pairs.append((i, j))
    return pairs
