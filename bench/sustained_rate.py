"""Sustained submit-to-start (issue 24: at least 1,000 jobs/s with stand-in agents): one-GPU jobs submitted
through the REST API at a fixed rate for a fixed time, open loop (each submission is due at t0 + k / rate,
whatever the earlier ones took), from `--processes` x `--threads` keep-alive connections
(bench/lean_submit.py), to the live controller with
stand-in agents (bench/standin_agents.py: 16 nodes x 8 GPUs; a job ends as soon as it has started, so
capacity never limits). Reports the submissions per second achieved, the starts per second (jobs started
between the first submission and the last start), and the lag from a job's due time to its start (p50, p99).

    python bench/sustained_rate.py --rate 1000 --seconds 30 [--profile FILE: py-spy stacks of the controller]"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.harness import API, Cluster, wait_for  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import standin_agents  # noqa: E402
from lean_submit import submit_on_schedule  # noqa: E402

NODES, GPUS = 16, 8


def measure(rate: float = 1000, seconds: float = 30, processes: int = 4, threads: int = 8,
            profile: str | None = None) -> dict:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="perfscale-rate-") as tmp:
        cluster = Cluster(Path(tmp), nodes=0)
        cluster.start_controller()
        agents = standin_agents.spawn(cluster.url, cluster.secret_file, nodes=NODES, gpus=GPUS,
                                      prefix="perfscale-rate-", log=Path(tmp) / "agents.log")
        spy = None
        try:
            wait_for(lambda: len(cluster.nodes()) == NODES, timeout_s=60, message="stand-in agents registered")
            assert cluster.controller is not None
            controller = psutil.Process(cluster.controller.pid)
            cpu0 = sum(controller.cpu_times()[:2])
            if profile:
                spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-o", profile,
                                        "-p", str(controller.pid), "-r", "50", "-f", "raw", "--nonblocking"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            body = {"argv": ["true"], "gpus": 1, "workdir": tmp, "user": "perfscale", "output": "/dev/null",
                    "time_limit_s": 600}
            plan = [(k / rate, body) for k in range(int(rate * seconds))]
            t0 = time.time() + 1.0  # lean_submit's common start
            answered = submit_on_schedule(cluster.url, cluster.secret, plan, processes, threads, start_in_s=1.0)
            t_answered = max(a for _, _, a in answered)
            submitted = [(job_id, due) for job_id, due, _ in answered]
            wait_for(lambda: not cluster.http.get(f"{API}/jobs").json(), timeout_s=900, interval_s=0.5,
                     message="every job started and ended")
            cpu1 = sum(controller.cpu_times()[:2])
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT (not on SIGTERM)
                spy.wait(60)
            due = dict(submitted)
            starts: dict[int, float] = {}
            states: dict[str, int] = {}
            ids = list(due)
            for i in range(0, len(ids), 500):
                for job in cluster.http.get(f"{API}/accounting", params={"ids": ",".join(map(str, ids[i:i + 500]))}
                                            ).json():
                    states[job["state"]] = states.get(job["state"], 0) + 1
                    if job.get("start_time") is not None:
                        starts[job["id"]] = job["start_time"]
        finally:
            agents.terminate()
            agents.wait(10)
            cluster.stop()
    lags = sorted(starts[j] - due[j] for j in starts)
    last_start = max(starts.values())
    return {"bench": "sustained-rate", "target_per_s": rate, "seconds": seconds,
            "submitters": f"{processes} processes x {threads} threads",
            "nodes": NODES, "gpus_per_node": GPUS, "jobs": len(submitted),
            "submitted_per_s": round(len(submitted) / (t_answered - t0), 1),
            "started_per_s": round(len(starts) / (last_start - t0), 1),
            "lag_p50_s": round(lags[len(lags) // 2], 3), "lag_p99_s": round(lags[int(len(lags) * 0.99)], 3),
            "lag_max_s": round(lags[-1], 3), "final_states": states,
            "controller_cpu_ms_per_job": round((cpu1 - cpu0) / len(submitted) * 1000, 2),
            "load_avg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--profile", help="write py-spy collapsed stacks of the controller here")
    args = parser.parse_args()
    result = measure(args.rate, args.seconds, args.processes, args.threads, args.profile)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
