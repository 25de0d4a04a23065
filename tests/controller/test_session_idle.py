"""A session's idle rule (controller/session_idle.py): idle only when JupyterLab's kernels are idle (none
busy, no activity) AND its GPUs have been under 5% for the idle timeout; what cannot be told keeps it."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from corral.controller.session_idle import KernelActivity, check_period_s, idle_verdict, kernel_activity

NOW = datetime(2026, 11, 28, 8, 30, 0, tzinfo=UTC).timestamp()
QUIET = KernelActivity(kernels=1, busy=0, idle_s=1800)


def gpus(idle_s: float, count: int = 1) -> dict:
    return {"gpus": count, "gpu_idle_s": idle_s}


@pytest.mark.parametrize(("kernels", "usage", "holds_gpus", "verdict"), [
    # Both idle for the timeout: stopped, saying why.
    (QUIET, gpus(1800), True, "idle for 30:00: kernels idle and GPU utilisation below 5%"),
    # Jupyter's kernels idle while a thread of one keeps the GPU busy: kept.
    (QUIET, gpus(12), True, None),
    # A busy kernel (a cell running) is not idle, whatever the GPU says.
    (KernelActivity(kernels=2, busy=1, idle_s=1800), gpus(1800), True, None),
    # Recent activity (a request, a kernel's output): kept.
    (KernelActivity(kernels=1, busy=0, idle_s=1799), gpus(1800), True, None),
    # JupyterLab did not answer, or its GPUs were never sampled (a node without NVML): kept.
    (None, gpus(1800), True, None),
    (QUIET, None, True, None),
    (QUIET, gpus(1800, count=0), True, None),
    # A session without GPUs: its kernels alone decide.
    (QUIET, None, False, "idle for 30:00: kernels idle (it holds no GPU)"),
])
def test_idle_only_when_kernels_and_gpus_both_are(kernels, usage, holds_gpus, verdict):
    assert idle_verdict(kernels, usage, holds_gpus, 1800) == verdict


def test_jupyters_answers_read_as_kernel_activity():
    status = {"started": "2026-11-28T08:00:00.000000Z", "last_activity": "2026-11-28T08:29:50.500000Z",
              "kernels": 2, "connections": 1}
    kernels = [{"id": "a", "execution_state": "idle"}, {"id": "b", "execution_state": "busy"}]
    assert kernel_activity(status, kernels, NOW) == KernelActivity(kernels=2, busy=1, idle_s=9.5)
    assert kernel_activity({"last_activity": "2026-11-28T08:31:00+00:00"}, [], NOW).idle_s == 0  # clock skew
    with pytest.raises(KeyError):
        kernel_activity({}, [], NOW)
    with pytest.raises(ValueError):
        kernel_activity({"last_activity": "yesterday"}, [], NOW)


def test_a_session_is_looked_at_often_enough_for_its_timeout():
    assert check_period_s(10) == 2 and check_period_s(1800) == 30 and check_period_s(2) == 1
