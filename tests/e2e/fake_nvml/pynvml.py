"""A stand-in for nvidia-ml-py (`pynvml`) for agents started by the end-to-end tests: this machine has no
GPU. The devices are named by $FAKE_NVML_NAMES (comma-separated NVML names, one per device); they have
no PCIe topology to report. Their utilisation (percent) and used memory (MiB) are $FAKE_NVML_UTIL and
$FAKE_NVML_USED_MIB (comma-separated, one per device; 0 where not given). Only what corral.agent.discovery,
corral.agent.usage and corral.agent.nvml_health call is here.

Faults: a test writes JSON to the file $FAKE_NVML_HEALTH names (read at every call, so it may change while
the agent runs; absent: all healthy):
  {"xids": [[gpu, xid], ...],              XID events, each delivered once by nvmlEventSetWait, in order
   "ecc_uncorrected": {"gpu": count},      nvmlDeviceGetTotalEccErrors (uncorrected, volatile)
   "retired_pending": [gpu, ...],          nvmlDeviceGetRetiredPagesPendingStatus answers enabled
   "remapped_rows": {"gpu": [corrected, uncorrected, pending, failed]},
   "nvlink_errors": {"gpu": {"link": count}},  those links are active, with `count` replay errors
   "lost": [gpu, ...],                     every query about that GPU fails with GPU_IS_LOST
   "no_ecc": true,                         ECC and retired-page queries are not supported (a board without)
   "util": {"gpu": percent}}               that GPU's utilisation now, over $FAKE_NVML_UTIL's
"""
from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

NVML_NVLINK_MAX_LINKS = 18
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TOPOLOGY_MULTIPLE = 20
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
nvmlEventTypeXidCriticalError = 0x8  # noqa: N816 - pynvml's name


class NVMLError(Exception):
    def __init__(self, value: int | str) -> None:
        super().__init__(value)
        self.value = value


def _names() -> list[str]:
    return [n for n in os.environ.get("FAKE_NVML_NAMES", "").split(",") if n]


def _health() -> dict:
    path = os.environ.get("FAKE_NVML_HEALTH")
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):  # not written yet, or being written
        return {}


def _device(handle: int) -> dict:
    health = _health()
    if handle in health.get("lost", []):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return health


def nvmlInit() -> None:  # noqa: N802 - pynvml's names
    pass


def nvmlShutdown() -> None:  # noqa: N802
    pass


def nvmlDeviceGetCount() -> int:  # noqa: N802
    return len(_names())


def nvmlDeviceGetHandleByIndex(index: int) -> int:  # noqa: N802
    return index


def nvmlDeviceGetIndex(handle: int) -> int:  # noqa: N802
    return handle


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
    now = _health().get("util", {}).get(str(handle))
    return SimpleNamespace(gpu=_per_device("FAKE_NVML_UTIL", handle) if now is None else int(now), memory=0)


def nvmlDeviceGetPciInfo(handle: int) -> SimpleNamespace:  # noqa: N802
    return SimpleNamespace(domain=0, bus=0x10 + handle, device=0)


def nvmlDeviceGetNvLinkState(handle: int, link: int) -> int:  # noqa: N802
    links = _device(handle).get("nvlink_errors", {}).get(str(handle), {})
    if str(link) in links:
        return NVML_FEATURE_ENABLED
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetNvLinkRemotePciInfo(handle: int, link: int) -> SimpleNamespace:  # noqa: N802
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetNvLinkErrorCounter(handle: int, link: int, counter: int) -> int:  # noqa: N802
    links = _device(handle).get("nvlink_errors", {}).get(str(handle), {})
    return int(links.get(str(link), 0)) if counter == NVML_NVLINK_ERROR_DL_REPLAY else 0


def nvmlDeviceGetMinorNumber(handle: int) -> int:  # noqa: N802
    return handle


def nvmlDeviceGetTopologyCommonAncestor(a: int, b: int) -> int:  # noqa: N802
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetTotalEccErrors(handle: int, error_type: int, counter_type: int) -> int:  # noqa: N802
    health = _device(handle)
    if health.get("no_ecc"):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if (error_type, counter_type) != (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC):
        return 0
    return int(health.get("ecc_uncorrected", {}).get(str(handle), 0))


def nvmlDeviceGetRetiredPagesPendingStatus(handle: int) -> int:  # noqa: N802
    health = _device(handle)
    if health.get("no_ecc"):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return NVML_FEATURE_ENABLED if handle in health.get("retired_pending", []) else NVML_FEATURE_DISABLED


def nvmlDeviceGetRemappedRows(handle: int) -> tuple[int, int, int, int]:  # noqa: N802
    rows = _device(handle).get("remapped_rows", {}).get(str(handle), [0, 0, 0, 0])
    return tuple(int(v) for v in rows)


class _EventSet:
    def __init__(self) -> None:
        self.devices: set[int] = set()
        self.delivered = 0  # XIDs of the health file handed out so far


def nvmlEventSetCreate() -> _EventSet:  # noqa: N802
    return _EventSet()


def nvmlDeviceRegisterEvents(handle: int, event_types: int, event_set: _EventSet) -> None:  # noqa: N802
    if event_types & nvmlEventTypeXidCriticalError:
        event_set.devices.add(handle)


def nvmlEventSetWait(event_set: _EventSet, timeoutms: int) -> SimpleNamespace:  # noqa: N802
    deadline = time.monotonic() + timeoutms / 1000
    while True:
        xids = [(gpu, xid) for gpu, xid in _health().get("xids", []) if gpu in event_set.devices]
        if len(xids) > event_set.delivered:
            gpu, xid = xids[event_set.delivered]
            event_set.delivered += 1
            return SimpleNamespace(device=gpu, eventType=nvmlEventTypeXidCriticalError, eventData=xid,
                                   gpuInstanceId=0, computeInstanceId=0)
        if time.monotonic() >= deadline:
            raise NVMLError(NVML_ERROR_TIMEOUT)
        time.sleep(min(0.05, timeoutms / 1000))


def nvmlEventSetFree(event_set: _EventSet) -> None:  # noqa: N802
    pass
