"""`make bench`: every benchmark, one JSON line each, also written to bench/results/latest.json."""
from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import cycle  # noqa: E402
import kueue_scenarios  # noqa: E402
import polling_load  # noqa: E402
import read_paths  # noqa: E402
import sacct_million  # noqa: E402
import sbatch_throughput  # noqa: E402
import security_overhead  # noqa: E402
import slurm_latency  # noqa: E402
import sustained_rate  # noqa: E402
import tenancy_cycle  # noqa: E402
import throughput  # noqa: E402


def slurm_reference(jobs: int) -> dict | None:
    """Real Slurm's figure for the same N jobs, when the anchor is running (see ../shared/anchors/slurm)."""
    script = HERE.parent.parent / "shared" / "anchors" / "slurm" / "bench-throughput.sh"
    probe = subprocess.run(["sh", "-c", "command -v sbatch && sinfo -h"], capture_output=True, text=True)
    if not script.exists() or probe.returncode != 0 or "/usr/bin/sbatch" not in probe.stdout:
        return None
    out = subprocess.run(["bash", str(script), str(jobs)], capture_output=True, text=True, timeout=900)
    fields = dict(kv.split("=") for kv in out.stdout.split())
    return {"bench": "slurm-throughput", "jobs": jobs, **{k: float(v) for k, v in fields.items()}}


def main() -> None:
    jobs = 500
    results = {"machine": f"{platform.node()} {platform.processor()} cpus={__import__('os').cpu_count()}",
               "when": time.strftime("%Y-%m-%d %H:%M:%S"), "results": []}
    for r in cycle.main():
        results["results"].append(r)
    r = tenancy_cycle.measure()
    print(json.dumps(r))
    results["results"].append(r)
    r = throughput.measure(jobs)
    print(json.dumps(r))
    results["results"].append(r)
    r_cli = throughput.measure_cli(50)
    print(json.dumps(r_cli))
    results["results"].append(r_cli)
    # sbatch-driven, as workflow tools drive a cluster: corral as installed, corral's Python entry points
    # alone (before decision 0021) and real Slurm when it runs, in one run.
    r_sbatch = sbatch_throughput.run(300)
    print(json.dumps(r_sbatch))
    results["results"].append(r_sbatch)
    ref = slurm_reference(jobs)
    if ref is not None:
        print(json.dumps(ref))
        results["results"].append(ref)
        print(json.dumps({"e2e_ratio_corral_over_slurm": round(r["e2e_jobs_per_s"] / ref["e2e_jobs_per_s"], 2)}))
    else:
        print("real Slurm is not running: start ../shared/anchors/slurm/setup.sh for the side-by-side figure")
    # Per-call latency of the Slurm commands (500 sbatch, 100 squeue), real Slurm's beside it when it runs.
    r_latency = slurm_latency.run(500, 100)
    print(json.dumps(r_latency))
    results["results"].append(r_latency)
    if r_latency["slurm"] is None:
        print(slurm_latency.NO_SLURM)
    # squeue, sacct, `corral queue` and GET /accounting over 100,000 jobs; memory across a restart.
    r_reads = read_paths.measure()
    print(json.dumps(r_reads))
    results["results"].append(r_reads)
    r_sacct = sacct_million.measure()
    print(json.dumps(r_sacct))
    results["results"].append(r_sacct)
    # Identity, TLS and confinement on vs off, in one run (root only for "on").
    for on in ([False, True] if __import__("os").geteuid() == 0 else [False]):
        r_security = security_overhead.measure(on)
        print(json.dumps(r_security))
        results["results"].append(r_security)
    # 1,000 pollers without and with [ratelimit]; the controller's memory with 100,000 pending jobs.
    for r_polling in (polling_load.measure(), polling_load.measure_pending()):
        print(json.dumps(r_polling))
        results["results"].append(r_polling)
    # Kueue's baseline scenario (15,000 workloads, 5 cohorts x 6 queues) through the live controller with
    # stand-in agents, beside Kueue's published figures; then 1,000 submissions/s for 30 s, submit to start.
    r_kueue = kueue_scenarios.run("baseline")
    print(json.dumps(r_kueue))
    results["results"].append(r_kueue)
    r_rate = sustained_rate.measure(1000, 30)
    print(json.dumps(r_rate))
    results["results"].append(r_rate)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
