"""Notebooks giving their GPU back, measured end to end with a real JupyterLab through the gateway:

- idleness is judged by Jupyter's kernels AND the GPU's utilisation (the agent's NVML samples, here the
  stand-in's, which the test sets): a session whose kernels are idle while its GPU is busy is kept past its
  idle timeout; once the GPU is idle too, it is stopped, the reason in its history and its log, and a batch
  job that waited for the GPU starts;
- a session in the low-priority QOS `notebooks` is reclaimed by a job of the QOS `train` that may preempt it:
  the warning line in the notebook's log, the session ends (PREEMPTED, its service gone, not requeued), and
  the preemptor starts on its GPU.

Each prints its timings (tests/e2e, docs/results.md has them with their conditions)."""
from __future__ import annotations

import asyncio
import os
import time

import pytest

from tests.e2e.harness import API, wait_for
from tests.e2e.notebooks import (
    browser_cookies,
    corral,
    gateway_for,
    needs_jupyter,
    notebook_cluster,
    run_in_kernel,
    set_gpu_util,
    started_notebook,
    stop_sessions,
    wait_for_line,
)

pytestmark = [pytest.mark.slow, needs_jupyter]
IDLE_S = 10
GRACE_S = 5
QOS = f"""
kill_grace_s = 2
node_timeout_s = 15
[[qos]]
name = "notebooks"
grace_s = {GRACE_S}
[[qos]]
name = "normal"
priority = 5
[[qos]]
name = "train"
priority = 10
preempts = ["notebooks"]
"""
WARNING = "corral notebook: WARNING: this session is being stopped now"


@pytest.fixture
def served(tmp_path):
    cluster = notebook_cluster(tmp_path, QOS).start()
    try:
        with gateway_for(cluster, tmp_path) as url:
            yield cluster, url
    finally:
        stop_sessions(cluster)
        cluster.stop()


def start_notebook(cluster, gateway_url, cwd, name: str, *options: str) -> tuple[int, str]:
    made = corral(cluster, cwd, "notebook", "--gpus", "1", "--time", "10:00", "--name", name, *options,
                  gateway=gateway_url)
    assert made.returncode == 0, made.stderr + cluster.logs()
    job_id, link = started_notebook(made)
    base = f"{gateway_url}/s/{name}/"
    assert asyncio.run(run_in_kernel(base, browser_cookies(link), "1+1")) == "2"
    return job_id, base


def load() -> str:
    return "load average %.2f %.2f %.2f on %d cores" % (*os.getloadavg(), os.cpu_count() or 0)


def test_a_busy_gpu_keeps_an_idle_kernels_session_and_both_idle_stop_it(served, tmp_path):
    cluster, gateway_url = served
    set_gpu_util(cluster, 90)  # a thread of the kernel keeps the GPU busy, as far as NVML can tell
    job_id, _ = start_notebook(cluster, gateway_url, tmp_path, "nb-gpubusy-notebook2", "--idle-timeout", f"0:{IDLE_S}")
    kernel_idle_since = time.time()
    waiting = cluster.submit(argv=["sleep", "1"], gpus_per_node=1, name="waits-for-the-gpu")

    # Well past the idle timeout with its kernel idle: kept, because its GPU is busy.
    time.sleep(IDLE_S * 2.5)
    assert cluster.job(job_id)["state"] == "RUNNING"
    assert cluster.job(waiting)["state"] == "PENDING"
    usage = cluster.job(job_id)["usage"]
    assert usage["gpus"] == 1 and usage["gpu_util_pct"] == 90, usage

    set_gpu_util(cluster, 0)
    gpu_idle_since = time.time()
    done = cluster.wait_state(job_id, "CANCELLED", "COMPLETED", "FAILED", timeout_s=IDLE_S + 60)
    why = "idle for 0:10: kernels idle and GPU utilisation below 5%"
    assert done["state"] == "CANCELLED" and done["history"][-1]["reason"] == why, done
    started = cluster.wait_state(waiting, "RUNNING", "COMPLETED", timeout_s=30)
    wait_for(lambda: cluster.http.get(f"{API}/services/nb-gpubusy-notebook2").status_code == 404, 10,
             message="the session's service gone")
    log = (tmp_path / f"nb-gpubusy-notebook2-{job_id}.out").read_text()
    assert f"corral: this session is stopped: {why}\n" in log and WARNING in log, log[-2000:]
    print(f"idle stop (idle timeout {IDLE_S} s, GPU sampled every 1 s, {load()}): kernels idle for "
          f"{gpu_idle_since - kernel_idle_since:.1f} s with the GPU busy, kept; from the GPU going idle: "
          f"job ended +{done['end_time'] - gpu_idle_since:.1f} s, the waiting batch job started "
          f"+{started['start_time'] - gpu_idle_since:.1f} s")


def test_a_training_job_reclaims_a_low_priority_sessions_gpu_after_a_warning(served, tmp_path):
    cluster, gateway_url = served
    job_id, _ = start_notebook(cluster, gateway_url, tmp_path, "nb-reclaim-notebook2", "--qos", "notebooks")
    log = tmp_path / f"nb-reclaim-notebook2-{job_id}.out"

    submitted = time.time()
    trainer = cluster.submit(argv=["sleep", "30"], gpus_per_node=1, qos="train", name="train")
    warned = wait_for_line(log, WARNING, 60)
    done = cluster.wait_state(job_id, "PREEMPTED", "CANCELLED", "COMPLETED", "FAILED", timeout_s=60)
    running = cluster.wait_state(trainer, "RUNNING", timeout_s=60)
    assert done["state"] == "PREEMPTED", done
    assert any(e["event"] == "preempted" for e in done["history"]), done["history"]
    assert "DUE TO PREEMPTION" in log.read_text()
    # Ended, not requeued as a batch job would be: its service is gone and no job of it waits.
    wait_for(lambda: cluster.http.get(f"{API}/services/nb-reclaim-notebook2").status_code == 404, 10,
             message="the session's service gone")
    again = [j for j in cluster.http.get(f"{API}/jobs").json() if j.get("name") == "nb-reclaim-notebook2"]
    assert again == [], again
    assert running["slices"][0]["gpus"] == done["slices"][0]["gpus"], (running, done)  # its GPU
    print(f"reclaim (QOS notebooks grace_s {GRACE_S}, {load()}): from the preemptor's submission: warning in "
          f"the log +{warned - submitted:.1f} s, session ended +{done['end_time'] - submitted:.1f} s, "
          f"preemptor started +{running['start_time'] - submitted:.1f} s")
    cluster.http.post(f"{API}/jobs/{trainer}/cancel")
