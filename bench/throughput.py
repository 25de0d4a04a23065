"""API submission rate and end-to-end throughput: N one-GPU `true` jobs on 4 local agents x 8 simulated
GPUs (the same shape as the real-Slurm anchor: 4 nodes x 8 GPUs). Submissions are sequential over one
HTTP connection; end-to-end is from the first submission until the last job has finished.

Here every node's agent shares this machine's cores with the controller, so the end-to-end rate also pays
the nodes' side (leaders, tasks); on a real cluster that work is spread over the nodes and the controller's
CPU per job is what bounds the rate. Hence the CPU per job by part (`cpu_ms_per_job`): the controller, the
agents, their descendants still running at the end (the leader factories, with the children they waited
for), the whole machine (/proc/stat: leaders and tasks are reaped by nobody who counts them, and the
bench's own client is in it), and `cluster`: everything this bench and the cluster it starts ran, reaped
or not (controller, agents, factories, leaders, tasks and the bench's client), counted by a CPU-accounting
cgroup the bench runs in, so that other work on a shared machine is not in it (where it cannot make one:
not root, no cgroup v2 nor v1 cpuacct, the figure is left out and the reason printed).

    python bench/throughput.py [JOBS] [--reference-src DIR [--rounds N]]

With --reference-src, before and after in one run: another revision's code and this tree's take turns, N
rounds, so that both see the same load. DIR is that revision's `src` (`git archive REV src | tar -x -C
/tmp/ref` gives /tmp/ref/src; copy the built task leader, src/corral/agent/corral-task-leader, into it)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.harness import API, Cluster, wait_for  # noqa: E402


def measure(jobs: int = 500) -> dict:
    with tempfile.TemporaryDirectory() as tmp, CpuGroup() as group:
        cluster = Cluster(Path(tmp), nodes=4, gpus=8).start()
        try:
            cpu_before = cpu_by_part(cluster, group)
            t0 = time.perf_counter()
            ids = [cluster.submit(argv=["true"], gpus=1, output="/dev/null") for _ in range(jobs)]
            t_submitted = time.perf_counter()

            def drained() -> bool:
                return not cluster.http.get(f"{API}/jobs").json()

            wait_for(drained, timeout_s=600, interval_s=0.2, message="queue drained")
            t_done = time.perf_counter()
            cpu_after = cpu_by_part(cluster, group)
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


class CpuGroup:
    """A CPU-accounting cgroup this process (and so whatever it starts from now on) runs in, for its
    lifetime: cgroup v2's cpu.stat, or v1's cpuacct. `usage_s()` is None where none could be made."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.home: Path | None = None

    def __enter__(self) -> CpuGroup:
        name = f"corral-bench-{os.getpid()}"
        for root, usage in ((Path("/sys/fs/cgroup"), "cpu.stat"), (Path("/sys/fs/cgroup/cpuacct"), "cpuacct.usage")):
            if not (root / "cgroup.procs").exists() or (usage == "cpu.stat" and not (root / usage).exists()):
                continue
            try:
                (root / name).mkdir()
                (root / name / "cgroup.procs").write_text(str(os.getpid()))
            except OSError as exc:
                print(f"throughput: no CPU-accounting cgroup under {root}: {exc}", file=sys.stderr)
                with contextlib.suppress(OSError):
                    (root / name).rmdir()
                continue
            self.path, self.home, self._usage = root / name, root, usage
            break
        return self

    def usage_s(self) -> float | None:
        if self.path is None:
            return None
        text = (self.path / self._usage).read_text()
        if self._usage == "cpuacct.usage":
            return int(text) / 1e9
        return int(dict(line.split() for line in text.splitlines())["usage_usec"]) / 1e6

    def __exit__(self, *exc: object) -> None:
        if self.path is None or self.home is None:
            return
        (self.home / "cgroup.procs").write_text(str(os.getpid()))
        deadline = time.monotonic() + 10  # the leader factories exit once their agents are gone
        while True:
            try:
                self.path.rmdir()
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    print(f"throughput: {self.path} left behind: {exc}", file=sys.stderr)
                    return
                time.sleep(0.1)


def cpu_by_part(cluster: Cluster, group: CpuGroup | None = None) -> dict[str, float]:
    """CPU seconds (user + system) used so far by the controller, the agents, the agents' descendants,
    the whole machine and (with `group`) the bench and its cluster."""
    agents = [psutil.Process(proc.pid) for proc in cluster.agents.values()]
    assert cluster.controller is not None
    return {"controller": _cpu(psutil.Process(cluster.controller.pid)),
            "agents": sum(_cpu(agent) for agent in agents),
            "agent_descendants": sum(_cpu(child, waited=True) for agent in agents
                                     for child in agent.children(recursive=True)),
            "machine": _machine_busy_s(),
            **({} if group is None or group.usage_s() is None else {"cluster": group.usage_s() or 0.0})}


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


def taking_turns(jobs: int, rounds: int, reference_src: str) -> None:
    """Before and after in one run: each round measures the code at `reference_src` (a checkout's `src`,
    put first on PYTHONPATH for the bench and every process its cluster starts) and then this tree's, each
    in a fresh process; one JSON line per measurement, with the load average before and after it."""
    for round_no in range(1, rounds + 1):
        for code, src in (("reference", reference_src), ("this", None)):
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            if src is not None:
                env["PYTHONPATH"] = src
            load_before = os.getloadavg()[0]
            run = subprocess.run([sys.executable, __file__, str(jobs)], env=env, check=True, capture_output=True,
                                 text=True)
            print(json.dumps({"round": round_no, "code": code, "src": src or str(ROOT / "src"),
                              "load_avg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                              **json.loads(run.stdout.splitlines()[-1])}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", nargs="?", type=int, default=500)
    parser.add_argument("--reference-src", metavar="DIR",
                        help="also measure the code in DIR (another checkout's src), taking turns with this tree's")
    parser.add_argument("--rounds", type=int, default=3, help="with --reference-src: rounds of both (default 3)")
    args = parser.parse_args()
    if args.reference_src:
        taking_turns(args.jobs, args.rounds, str(Path(args.reference_src).resolve()))
    else:
        print(json.dumps(measure(args.jobs)))
