"""What `corral up` needs to know about this machine: CPUs, memory, and whether NVML sees GPUs."""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HostFacts:
    cpus: int
    mem_mib: int
    nvml_gpus: int | None  # None: no NVML (no driver, no library); else the GPUs it reports


def probe_host() -> HostFacts:
    import psutil

    return HostFacts(
        cpus=os.cpu_count() or 1,
        mem_mib=psutil.virtual_memory().total // (1024 * 1024),
        nvml_gpus=nvml_gpu_count(),
    )


def nvml_gpu_count() -> int | None:
    """GPUs NVML reports, or None when NVML cannot start (no driver): imported only when asked."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no usable GPUs here
        return None
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
