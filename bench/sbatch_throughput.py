"""sbatch-driven throughput, as workflow tools drive a cluster: N one-GPU `sbatch --parsable --gres=gpu:1 -o
/dev/null --wrap true` processes one after another (submissions/s), then `squeue -h` every 0.2 s until the
queue is empty (end to end, jobs/s from the first submission): the method of the Slurm anchor's
bench-throughput.sh, here in Python so that every way is timed by the same loop.

In one run, one way after the other, each on an empty queue: corral's commands as installed (the native
front-end and the user's command helper, decision 0021), corral's Python entry points each call in its own
process (CORRAL_COMMAND_HELPER=0: how they ran before), and real Slurm 22.05's /usr/bin/sbatch when its
`sinfo` answers (the anchor: 4 nodes x 8 GPUs). corral runs a local cluster of the same shape (controller
and 4 agents x 8 simulated GPUs, SQLite). Prints one JSON line with the load average before and after, and
for corral as installed the CPU milliseconds per job by part, while submitting and while draining: the
controller, the agents, their descendants (leader factories with the leaders and tasks they waited for),
the command helper, this bench's children (sbatch front-ends, squeue) and the whole machine (which on a
shared host holds others' work too).

    python bench/sbatch_throughput.py [--jobs N] [--rounds R] [--ways corral,slurm]   (300, 1, all)"""
from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from slurm_latency import SLURM_BIN, helper_pids, python_entry_points, slurm_available, stop_helper  # noqa: E402
from tests.e2e.harness import Cluster  # noqa: E402
from throughput import cpu_by_part  # noqa: E402

from corral.slurm.front import HELPER_SWITCH, socket_path  # noqa: E402

SBATCH_ARGS = ("--parsable", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "true")


def queue_empty(bin_dir: Path, env: dict[str, str]) -> bool:
    out = subprocess.run([str(bin_dir / "squeue"), "-h"], env=env, capture_output=True, text=True, check=True)
    return not out.stdout.strip()


def drive(bin_dir: Path, env: dict[str, str], jobs: int, workdir: str, timeout_s: float = 900,
          cpu: Callable[[], dict[str, float]] | None = None) -> dict:
    """bench-throughput.sh's loop: submissions/s and end-to-end jobs/s; with `cpu` (CPU seconds so far by
    part), the CPU milliseconds per job each part used while the jobs were submitted and until they drained."""
    deadline = time.monotonic() + timeout_s
    while not queue_empty(bin_dir, env):
        if time.monotonic() > deadline:
            raise SystemExit(f"{bin_dir}: the queue is not empty")
        time.sleep(0.5)
    marks = [cpu()] if cpu else []
    start = time.perf_counter()
    for _ in range(jobs):
        subprocess.run([str(bin_dir / "sbatch"), *SBATCH_ARGS], env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, check=True, cwd=workdir)
    submitted = time.perf_counter()
    marks += [cpu()] if cpu else []
    while not queue_empty(bin_dir, env):
        if time.monotonic() > deadline:
            raise SystemExit(f"{bin_dir}: the queue did not drain")
        time.sleep(0.2)
    done = time.perf_counter()
    marks += [cpu()] if cpu else []
    figures = {"submit_per_s": round(jobs / (submitted - start), 1),
               "e2e_jobs_per_s": round(jobs / (done - start), 1)}
    if marks:
        figures["cpu_ms_per_job"] = {
            phase: {part: round((after[part] - before[part]) / jobs * 1000, 2) for part in after}
            for phase, before, after in (("submitting", marks[0], marks[1]), ("draining", marks[1], marks[2]))}
    return figures


def corral_cpu(cluster: Cluster, helper_socket: str) -> dict[str, float]:
    """CPU seconds so far: the cluster's parts (throughput.py), the user's command helper with the children
    it waited for, and this process's children (the sbatch and squeue processes, the front-ends)."""
    helper = 0.0
    for pid in helper_pids(helper_socket):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        helper += sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    clients = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {**cpu_by_part(cluster), "helper": helper, "clients": clients.ru_utime + clients.ru_stime}


WAYS = ("corral", "corral_python", "slurm")


def run(jobs: int = 300, rounds: int = 1, only: tuple[str, ...] = WAYS) -> dict:
    result: dict = {"bench": "sbatch-throughput", "jobs": jobs, "loadavg_before": os.getloadavg()[0]}
    slurm = slurm_available()
    with tempfile.TemporaryDirectory(prefix="corral-sbatch-throughput-") as tmp:
        cluster = Cluster(Path(tmp), nodes=4, gpus=8).start()
        try:
            runtime = Path(tmp) / "run"  # the command helper's private directory, this run's own
            runtime.mkdir(mode=0o700)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "SLURM_", "SBATCH_"))}
            env |= {"CORRAL_URL": cluster.url, "CORRAL_SECRET_FILE": str(cluster.secret_file),
                    "XDG_RUNTIME_DIR": str(runtime)}
            scripts = Path(sysconfig.get_path("scripts"))
            subprocess.run([str(scripts / "squeue"), "--version"], env=env, capture_output=True, check=True)
            time.sleep(2)  # the helper that first call started is ready
            ways = {"corral": (scripts, env),
                    "corral_python": (python_entry_points(scripts), {**env, HELPER_SWITCH: "0"})}
            if slurm:
                ways["slurm"] = (SLURM_BIN, dict(os.environ))
            ways = {label: way for label, way in ways.items() if label in only}
            figures: dict[str, list[dict]] = {label: [] for label in ways}
            for _ in range(rounds):
                for label, (bin_dir, way_env) in ways.items():
                    cpu = functools.partial(corral_cpu, cluster, str(socket_path(env))) if label == "corral" else None
                    figures[label].append(drive(bin_dir, way_env, jobs, tmp, cpu=cpu))
        finally:
            stop_helper(str(socket_path(env)))  # it would outlive the run by its idle time
            cluster.stop()
    result |= {label: runs if rounds > 1 else runs[0] for label, runs in figures.items()}
    if "slurm" in figures:
        result["ratio_corral_over_slurm"] = {
            f"{label}_{key}": round(_mean(figures[label], key) / _mean(figures["slurm"], key), 2)
            for label in ("corral", "corral_python") if label in figures for key in ("submit_per_s", "e2e_jobs_per_s")}
    elif not slurm:
        result["slurm_skipped"] = "real Slurm is not running (no answer from /usr/bin/sinfo)"
    result["loadavg_after"] = os.getloadavg()[0]
    return result


def _mean(runs: list[dict], key: str) -> float:
    return sum(run[key] for run in runs) / len(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--ways", default=",".join(WAYS), help=f"which of {', '.join(WAYS)} to drive (all)")
    args = parser.parse_args()
    only = tuple(args.ways.split(","))
    if unknown := set(only) - set(WAYS):
        parser.error(f"--ways: no such way {', '.join(sorted(unknown))} (one of {', '.join(WAYS)})")
    print(json.dumps(run(args.jobs, args.rounds, only)))


if __name__ == "__main__":
    main()
