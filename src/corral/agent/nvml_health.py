"""What NVML says is wrong with this node's GPUs: critical XID events as they happen, and counters polled
now and then (uncorrected ECC errors, retired pages or remapped rows awaiting a GPU reset, NVLink errors).

Every call blocks (NVML is a C library): the health monitor (health.py) runs them in a thread. Each check
returns the reasons the node should be drained, worded as Slurm drain reasons ("XID 79 on GPU 2 (GPU has
fallen off the bus)"); a query the device does not support (no ECC on the board, no NVLink, retired pages
on an Ampere that remaps rows instead) is skipped, not a failure.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

# XIDs that mean the node (not just the job that hit them) needs an operator: the GPU must be reset, its
# memory is failing, or it has left the bus. From NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors),
# whose "recommended action" for these is a GPU reset, a node reboot or a hardware check; the same XIDs DCGM's
# health watches and NHC's GPU checks treat as fatal. Left out on purpose: the XIDs an application causes
# (13 graphics engine exception, 31 MMU fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video
# processor exception, 109 context switch timeout), which the Kubernetes device plugin also ignores
# (applicationErrorXids): they end the job, not the node's health.
FATAL_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
# Drain when a GPU's uncorrected ECC errors since the driver loaded (NVML's volatile count) pass this.
ECC_UNCORRECTED_LIMIT = 0
# Drain when one NVLink's replay, recovery and CRC errors grow by more than this between two polls.
NVLINK_ERRORS_LIMIT = 100
EVENT_WAIT_MS = 500  # how long one nvmlEventSetWait blocks: the watcher's thread notices a stop this fast


def xid_reason(gpu: int, xid: int) -> str | None:
    """The drain reason for XID `xid` on GPU `gpu`, or None when that XID is not fatal to the node."""
    what = FATAL_XIDS.get(xid)
    return None if what is None else f"XID {xid} on GPU {gpu} ({what})"


@dataclass
class NvmlHealth:
    """NVML's view of this node's GPUs' health. `open()` first (it registers for XID events), `close()` last."""

    ecc_limit: int = ECC_UNCORRECTED_LIMIT
    nvlink_limit: int = NVLINK_ERRORS_LIMIT
    _nvml: Any = None
    _handles: list[Any] = field(default_factory=list)
    _events: Any = None  # the event set, or None when no device reports XID events
    _nvlink_seen: dict[tuple[int, int], int] = field(default_factory=dict)  # (gpu, link) -> errors at last poll
    # Held through a wait on the event set: close() must not free the set under a waiting thread.
    _waiting: threading.Lock = field(default_factory=threading.Lock)

    def open(self) -> None:
        import pynvml  # the agent found its GPUs through NVML: it is installed

        nvml = self._nvml = pynvml
        nvml.nvmlInit()
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        events = nvml.nvmlEventSetCreate()
        watched = 0
        for index, handle in enumerate(self._handles):
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
                watched += 1
            except nvml.NVMLError as exc:
                log.warning("GPU %d reports no XID events (%s): only its counters are watched", index, exc)
        self._events = events if watched else None
        if self._events is None:
            nvml.nvmlEventSetFree(events)

    def close(self) -> None:
        if self._nvml is None:
            return
        with self._waiting:
            if self._events is not None:
                self._nvml.nvmlEventSetFree(self._events)
                self._events = None
        self._nvml.nvmlShutdown()
        self._nvml = None

    @property
    def watches_xids(self) -> bool:
        return self._events is not None

    def wait_xid(self, timeout_ms: int = EVENT_WAIT_MS) -> str | None:
        """Wait up to `timeout_ms` for an XID event; the drain reason if a fatal one came."""
        nvml = self._nvml
        with self._waiting:
            if self._events is None:
                return None  # closed
            try:
                data = nvml.nvmlEventSetWait(self._events, timeout_ms)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) == nvml.NVML_ERROR_TIMEOUT:
                    return None
                raise
        xid = int(data.eventData)
        gpu = nvml.nvmlDeviceGetIndex(data.device)
        reason = xid_reason(gpu, xid)
        (log.error if reason else log.warning)("XID %d on GPU %d%s", xid, gpu,
                                               "" if reason else " (an application's error: the node stays up)")
        return reason

    def check_counters(self) -> list[str]:
        """The drain reasons the counters give now (none: healthy)."""
        reasons: list[str] = []
        for gpu, handle in enumerate(self._handles):
            try:
                reasons += self._memory_reasons(gpu, handle)
                reasons += self._nvlink_reasons(gpu, handle)
            except _GpuLost:
                reasons.append(f"GPU {gpu} is lost (NVML cannot reach it)")
        return reasons

    def _memory_reasons(self, gpu: int, handle: Any) -> list[str]:
        nvml, reasons = self._nvml, []
        uncorrected = self._query(nvml.nvmlDeviceGetTotalEccErrors, handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                  nvml.NVML_VOLATILE_ECC)
        if uncorrected is not None and uncorrected > self.ecc_limit:
            reasons.append(f"{uncorrected} uncorrected ECC errors on GPU {gpu}")
        if self._query(nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle) == nvml.NVML_FEATURE_ENABLED:
            reasons.append(f"GPU {gpu} has retired pages pending a reset")
        rows = self._query(nvml.nvmlDeviceGetRemappedRows, handle)
        if rows is not None:
            _, _, pending, failed = rows
            if failed:
                reasons.append(f"GPU {gpu} failed to remap a row of its memory")
            elif pending:
                reasons.append(f"GPU {gpu} has remapped rows pending a reset")
        return reasons

    def _nvlink_reasons(self, gpu: int, handle: Any) -> list[str]:
        nvml, reasons = self._nvml, []
        counters = (nvml.NVML_NVLINK_ERROR_DL_REPLAY, nvml.NVML_NVLINK_ERROR_DL_RECOVERY,
                    nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT, nvml.NVML_NVLINK_ERROR_DL_CRC_DATA)
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            if self._query(nvml.nvmlDeviceGetNvLinkState, handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            counts = [self._query(nvml.nvmlDeviceGetNvLinkErrorCounter, handle, link, c) for c in counters]
            errors = sum(c for c in counts if c is not None)
            before = self._nvlink_seen.get((gpu, link))
            self._nvlink_seen[(gpu, link)] = errors
            if before is not None and errors - before > self.nvlink_limit:
                reasons.append(f"{errors - before} NVLink errors on link {link} of GPU {gpu}")
        return reasons

    def _query(self, fn: Any, *args: Any) -> Any:
        """NVML's answer, or None where the device does not support the query (or has no such link)."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) == self._nvml.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost from exc
            log.debug("%s%s: %s", fn.__name__, args[1:], exc)
            return None


class _GpuLost(Exception):
    """NVML answers that the GPU is lost (it fell off the bus): no further query about it makes sense."""
