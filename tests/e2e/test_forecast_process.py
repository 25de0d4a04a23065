"""End to end: a real controller (`python -m corral.controller`) makes its start-time forecasts in a child
process of its own, which ends with it."""
from __future__ import annotations

import psutil
import pytest

from tests.e2e.harness import wait_for

pytestmark = pytest.mark.slow


def forecast_children(controller_pid: int) -> list[psutil.Process]:
    return [child for child in psutil.Process(controller_pid).children()
            if "spawn_main" in " ".join(child.cmdline())]  # not multiprocessing's resource tracker


def test_a_pending_job_gets_a_forecast_made_in_the_controllers_child_process(cluster_factory) -> None:
    cluster = cluster_factory(nodes=1, gpus=2)
    running = cluster.submit(argv=["sleep", "300"], gpus=2, time_limit_s=600, output="/dev/null")
    cluster.wait_state(running, "RUNNING")
    waiting = cluster.submit(argv=["true"], gpus=2, time_limit_s=60, output="/dev/null")
    # A job that began waiting is forecast within seconds (NEW_JOBS_AFTER_S), not a whole pause later.
    wait_for(lambda: cluster.job(waiting)["estimated_start_source"] == "forecast", timeout_s=15,
             message="a forecast of the waiting job")
    job = cluster.job(waiting)
    # Nothing learnt yet: the running job is expected to run its whole limit.
    started = cluster.job(running)["start_time"]
    assert job["estimated_start"] == pytest.approx(started + 600, abs=61)
    children = forecast_children(cluster.controller.pid)
    assert len(children) == 1
    child = children[0]
    cluster.stop()
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
