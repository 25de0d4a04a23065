"""A stand-in for nvidia-ml-py (`pynvml`) for agents started by the end-to-end tests: this machine has no
GPU. The devices are named by $FAKE_NVML_NAMES (comma-separated NVML names, one per device); they have
no NVLink and no PCIe topology to report. Their utilisation (percent) and used memory (MiB) are
$FAKE_NVML_UTIL and $FAKE_NVML_USED_MIB (comma-separated, one per device; 0 where not given). Only what
corral.agent.discovery and corral.agent.usage call is here."""
from __future__ import annotations

import os
from types import SimpleNamespace

NVML_NVLINK_MAX_LINKS = 18
NVML_FEATURE_ENABLED = 1
NVML_TOPOLOGY_MULTIPLE = 20


class NVMLError(Exception):
    pass


def _names() -> list[str]:
    return [n for n in os.environ.get("FAKE_NVML_NAMES", "").split(",") if n]


def nvmlInit() -> None:  # noqa: N802 - pynvml's names
    pass


def nvmlShutdown() -> None:  # noqa: N802
    pass


def nvmlDeviceGetCount() -> int:  # noqa: N802
    return len(_names())


def nvmlDeviceGetHandleByIndex(index: int) -> int:  # noqa: N802
    return index


def nvmlDeviceGetName(handle: int) -> str:  # noqa: N802
    return _names()[handle]


def nvmlDeviceGetUUID(handle: int) -> str:  # noqa: N802
    return f"GPU-FAKE-{handle:04d}"


def _per_device(variable: str, handle: int) -> int:
    values = [v for v in os.environ.get(variable, "").split(",") if v]
    return int(values[handle]) if handle < len(values) else 0


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:  # noqa: N802
    used = _per_device("FAKE_NVML_USED_MIB", handle) * 1024 * 1024
    return SimpleNamespace(total=81559 * 1024 * 1024, used=used, free=81559 * 1024 * 1024 - used)


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:  # noqa: N802
    return SimpleNamespace(gpu=_per_device("FAKE_NVML_UTIL", handle), memory=0)


def nvmlDeviceGetPciInfo(handle: int) -> SimpleNamespace:  # noqa: N802
    return SimpleNamespace(domain=0, bus=0x10 + handle, device=0)


def nvmlDeviceGetNvLinkState(handle: int, link: int) -> int:  # noqa: N802
    raise NVMLError("not supported")


def nvmlDeviceGetMinorNumber(handle: int) -> int:  # noqa: N802
    return handle


def nvmlDeviceGetTopologyCommonAncestor(a: int, b: int) -> int:  # noqa: N802
    raise NVMLError("not supported")
