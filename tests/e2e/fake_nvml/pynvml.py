"""A stand-in for nvidia-ml-py (`pynvml`) for agents started by the end-to-end tests: this machine has no
GPU. The devices are named by $FAKE_NVML_NAMES (comma-separated NVML names, one per device); they have
no NVLink and no PCIe topology to report. Only what corral.agent.discovery calls is here."""
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


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:  # noqa: N802
    return SimpleNamespace(total=81559 * 1024 * 1024)


def nvmlDeviceGetPciInfo(handle: int) -> SimpleNamespace:  # noqa: N802
    return SimpleNamespace(domain=0, bus=0x10 + handle, device=0)


def nvmlDeviceGetNvLinkState(handle: int, link: int) -> int:  # noqa: N802
    raise NVMLError("not supported")


def nvmlDeviceGetMinorNumber(handle: int) -> int:  # noqa: N802
    return handle


def nvmlDeviceGetTopologyCommonAncestor(a: int, b: int) -> int:  # noqa: N802
    raise NVMLError("not supported")
