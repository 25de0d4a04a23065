"""What identity, TLS and confinement cost, measured in one run on one cluster shape (2 agents x 4
simulated GPUs, loopback):

- off: plain HTTP; sbatch with the cluster secret; agents run every task as themselves, no cgroups;
- on:  HTTPS with a private CA (clients verify it); sbatch with a user credential from the controller's auth
       socket (SO_PEERCRED, signed, 5 minutes); agents run each task as the job's user (root here: the
       bench runs as root) in cgroups per job where the host has them (cgroup v2, or v1 hierarchies).

Reports sbatch's median and p90 latency (`sbatch --hold --parsable --wrap true`, one process each) and
end-to-end jobs/s (one-GPU `true` jobs submitted over the API until the queue drains). Needs root for
"on" (tasks run as their user); otherwise it says so and measures "off" only.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.harness import API, Cluster, wait_for  # noqa: E402

SBATCH_RUNS = 40
JOBS = 150


def _cluster(root: Path, on: bool) -> Cluster:
    if not on:
        return Cluster(root, nodes=2, gpus=4)
    socket = root / "auth.sock"
    config = f'kill_grace_s = 2\nnode_timeout_s = 15\n[auth]\nsocket = "{socket}"\n'
    return Cluster(root, nodes=2, gpus=4, config=config, agent_args=(), tls_names=("127.0.0.1", "localhost"))


def _sbatch_env(cluster: Cluster, root: Path, on: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env["CORRAL_URL"] = cluster.url
    if not on:
        return {**env, "CORRAL_SECRET": cluster.secret}
    # The user finds the cluster, its CA and its auth socket in their cluster.json: no secret, no token.
    config_home = root / "config"
    (config_home / "corral").mkdir(parents=True)
    (config_home / "corral" / "cluster.json").write_text(json.dumps(
        {"url": cluster.url, "auth_socket": str(root / "auth.sock"), "ca_file": str(cluster.ca_file)}))
    return {**env, "XDG_CONFIG_HOME": str(config_home), "CORRAL_SYSTEM_CLUSTER_FILE": str(root / "none.json")}


def _sbatch_latency(env: dict[str, str], cwd: Path) -> tuple[float, float]:
    sbatch = str(Path(sys.executable).parent / "sbatch")
    times = []
    for _ in range(SBATCH_RUNS):
        t0 = time.perf_counter()
        subprocess.run([sbatch, "--hold", "--parsable", "-o", "/dev/null", "--wrap", "true"], env=env, cwd=cwd,
                       check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), statistics.quantiles(times, n=10)[-1]


def _throughput(cluster: Cluster) -> tuple[float, dict[str, int]]:
    """Jobs/s from the first submission until the last ended, and how they ended (all COMPLETED, or the
    figure means nothing)."""
    t0 = time.perf_counter()
    ids = [cluster.submit(argv=["true"], gpus=1, output="/dev/null", user="root") for _ in range(JOBS)]
    wait_for(lambda: not [j for j in cluster.http.get(f"{API}/jobs").json() if j["state"] != "PENDING"
                          or j["reason"] != "JobHeldUser"], timeout_s=600, interval_s=0.2, message="drained")
    elapsed = time.perf_counter() - t0
    states: dict[str, int] = {}
    for job in cluster.http.get(f"{API}/accounting", params={"ids": ",".join(map(str, ids))}).json():
        states[job["state"]] = states.get(job["state"], 0) + 1
    return JOBS / elapsed, states


def measure(on: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        cluster = _cluster(root, on).start()
        try:
            median, p90 = _sbatch_latency(_sbatch_env(cluster, root, on), root)
            jobs_per_s, states = _throughput(cluster)
            isolation = sorted({n.get("cgroups", "") for n in cluster.nodes()})
        finally:
            cluster.stop()
    return {"bench": "security_overhead", "mode": "on" if on else "off", "sbatch_median_ms": round(median * 1e3, 1),
            "sbatch_p90_ms": round(p90 * 1e3, 1), "e2e_jobs_per_s": round(jobs_per_s, 1), "final_states": states,
            "isolation": isolation}


if __name__ == "__main__":
    modes = [False, True] if os.geteuid() == 0 else [False]
    if os.geteuid() != 0:
        print("security_overhead: not root: 'on' (tasks as their user) is not measured", file=sys.stderr)
    for on in modes:
        print(json.dumps(measure(on)))
