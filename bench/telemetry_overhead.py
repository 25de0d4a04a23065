"""What per-job telemetry costs an agent (issue 14): its CPU time with 8 running jobs sampled every N
seconds, against the same 8 jobs with sampling off (sbatch --acctg-freq=task=0).

One controller and one agent (outside cgroups: psutil reads each job's processes), 8 jobs of `sleep`;
the agent's CPU time (user + system, psutil) over a window once every job runs.

    PYTHONPATH=src python bench/telemetry_overhead.py [off] [1] [30] ...   # one JSON line per setting
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from tests.e2e.harness import Cluster  # noqa: E402

JOBS = 8
WINDOW_S = 60.0


def agent_cpu_pct(setting: str) -> dict:
    sampled = setting != "off"
    freq = setting if sampled else "30"
    root = Path(tempfile.mkdtemp(prefix=f"corral-telemetry-{setting}-"))
    cluster = Cluster(root, nodes=1, gpus=8,
                      agent_args=("--tasks-as-agent-user", "--no-cgroups", "--acctg-freq", freq)).start()
    ids: list[int] = []
    try:
        extra = {} if sampled else {"acctg_freq_s": 0}
        ids = [cluster.submit(argv=["sleep", "600"], name=f"s{i}", **extra) for i in range(JOBS)]
        for job_id in ids:
            cluster.wait_state(job_id, "RUNNING", timeout_s=60)
        time.sleep(5)
        agent = psutil.Process(cluster.agents["node1"].pid)
        before, start = agent.cpu_times(), time.monotonic()
        time.sleep(WINDOW_S)
        after, wall_s = agent.cpu_times(), time.monotonic() - start
        used_s = after.user + after.system - before.user - before.system
        samples = [(cluster.job(i).get("usage") or {}).get("samples", 0) for i in ids]
        return {"acctg_freq": setting, "jobs": JOBS, "window_s": round(wall_s, 1),
                "agent_cpu_pct": round(100 * used_s / wall_s, 2), "samples_per_job": samples}
    finally:
        for job_id in ids:
            cluster.http.post(f"/api/v1/jobs/{job_id}/cancel")
        time.sleep(2)
        cluster.stop()


if __name__ == "__main__":
    for setting in sys.argv[1:] or ["off", "30", "1"]:
        print(json.dumps(agent_cpu_pct(setting)), flush=True)
