"""API submission rate and end-to-end throughput: N one-GPU `true` jobs on 4 local agents x 8 simulated
GPUs (the same shape as the real-Slurm anchor: 4 nodes x 8 GPUs). Submissions are sequential over one
HTTP connection; end-to-end is from the first submission until the last job has finished.

Here every node's agent shares this machine's cores with the controller, so the end-to-end rate also pays
the nodes' side (leaders, tasks); on a real cluster that work is spread over the nodes and the controller's
CPU per job is what bounds the rate. Hence the CPU per job by part (`cpu_ms_per_job`): the controller, the
agents, their descendants still running at the end (the leader factories, with the children they waited
for), and the whole machine (/proc/stat: leaders and tasks are reaped by nobody who counts them, and
the bench's own client is in it)."""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.harness import API, Cluster, wait_for  # noqa: E402


def measure(jobs: int = 500) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), nodes=4, gpus=8).start()
        try:
            cpu_before = cpu_by_part(cluster)
            t0 = time.perf_counter()
            ids = [cluster.submit(argv=["true"], gpus=1, output="/dev/null") for _ in range(jobs)]
            t_submitted = time.perf_counter()

            def drained() -> bool:
                return not cluster.http.get(f"{API}/jobs").json()

            wait_for(drained, timeout_s=600, interval_s=0.2, message="queue drained")
            t_done = time.perf_counter()
            cpu_after = cpu_by_part(cluster)
            acct = cluster.http.get(f"{API}/accounting", params={"ids": ",".join(map(str, ids))}).json()
            states = {}
            for job in acct:
                states[job["state"]] = states.get(job["state"], 0) + 1
        finally:
            cluster.stop()
    return {
        "bench": "throughput", "jobs": jobs, "nodes": 4, "gpus_per_node": 8,
        "submit_per_s": round(jobs / (t_submitted - t0), 1),
        "e2e_jobs_per_s": round(jobs / (t_done - t0), 1),
        "final_states": states,
        "cpu_ms_per_job": {part: round((cpu_after[part] - cpu_before[part]) / jobs * 1000, 2) for part in cpu_after},
    }


def cpu_by_part(cluster: Cluster) -> dict[str, float]:
    """CPU seconds (user + system) used so far by the controller, the agents, the agents' descendants and
    the whole machine."""
    agents = [psutil.Process(proc.pid) for proc in cluster.agents.values()]
    assert cluster.controller is not None
    return {"controller": _cpu(psutil.Process(cluster.controller.pid)),
            "agents": sum(_cpu(agent) for agent in agents),
            "agent_descendants": sum(_cpu(child, waited=True) for agent in agents
                                     for child in agent.children(recursive=True)),
            "machine": _machine_busy_s()}


def _cpu(proc: psutil.Process, waited: bool = False) -> float:
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0  # gone since it was listed
    return times.user + times.system + ((times.children_user + times.children_system) if waited else 0.0)


def _machine_busy_s() -> float:
    t = psutil.cpu_times()  # guest time is already in user's
    return t.user + t.nice + t.system + t.irq + t.softirq + t.steal


def measure_cli(jobs: int = 50) -> dict:
    """The same, but one `corral submit` process per job, as workflow tools drive a scheduler."""
    import os
    import subprocess

    corral = str(Path(sys.executable).parent / "corral")
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), nodes=4, gpus=8).start()
        env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_SECRET": cluster.secret}
        try:
            t0 = time.perf_counter()
            for _ in range(jobs):
                subprocess.run([corral, "submit", "--gpus=1", "-o", "/dev/null", "--wrap", "true"], env=env,
                               check=True, capture_output=True, cwd=tmp)
            t_submitted = time.perf_counter()
            wait_for(lambda: not cluster.http.get(f"{API}/jobs").json(), timeout_s=600, interval_s=0.2)
            t_done = time.perf_counter()
        finally:
            cluster.stop()
    return {"bench": "throughput-cli", "jobs": jobs, "submit_per_s": round(jobs / (t_submitted - t0), 1),
            "e2e_jobs_per_s": round(jobs / (t_done - t0), 1)}


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 500)))
