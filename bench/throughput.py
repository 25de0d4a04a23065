"""API submission rate and end-to-end throughput: N one-GPU `true` jobs on 4 local agents x 8 simulated
GPUs (the same shape as the real-Slurm anchor: 4 nodes x 8 GPUs). Submissions are sequential over one
HTTP connection; end-to-end is from the first submission until the last job has finished."""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.harness import API, Cluster, wait_for  # noqa: E402


def measure(jobs: int = 500) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), nodes=4, gpus=8).start()
        try:
            t0 = time.perf_counter()
            ids = [cluster.submit(argv=["true"], gpus=1, output="/dev/null") for _ in range(jobs)]
            t_submitted = time.perf_counter()

            def drained() -> bool:
                return not cluster.http.get(f"{API}/jobs").json()

            wait_for(drained, timeout_s=600, interval_s=0.2, message="queue drained")
            t_done = time.perf_counter()
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
    }


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
