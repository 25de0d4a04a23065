"""Kueue's scheduler performance scenarios (kubernetes-sigs/kueue, test/performance/scheduler/configs/
baseline/generator.yaml and rangespec.yaml) through corral's live controller with stand-in agents.

Kueue's baseline: 5 cohorts x 6 ClusterQueues, each with a nominal quota of 20 CPUs, a borrowing limit of
100, reclaimWithinCohort Any and withinClusterQueue LowerPriority. Each ClusterQueue gets 350 `small`
workloads (1 CPU, 200 ms, priority 50) one every 100 ms, 100 `medium` (5 CPUs, 500 ms, priority 100) one
every 500 ms and 50 `large` (20 CPUs, 1,000 ms, priority 200) one every 1,200 ms: 15,000 workloads.
Kueue admits by quota only (no pod is placed) and its runner ends a workload its runtime after admission.
Published (rangespec.yaml, mean of 5 runs of minimalkueue in envtest): wall 351.1 s; average time to
admission small 215.5 s, medium 76.8 s, large 6.7 s; ClusterQueue usage 58.7 %.

The mapping onto corral: a ClusterQueue is a `[[queues]]` entry with `nominal = { cpu = 20 }` and
`borrowing_limit = { cpu = 100 }` in its cohort; a workload is a job of that queue asking for its CPUs
(`cpus_per_task`, no GPU), its priority as the job's priority, running `sleep RUNTIME`, which the stand-in
agents (bench/standin_agents.py) "run" for exactly that long without starting a process. Runtimes and
intervals are Kueue's, not scaled. The nodes (20 x 64 CPUs, twice the cohorts' total quota) never limit:
quota is the only constraint, as in Kueue's run. Not mapped: withinClusterQueue LowerPriority (corral's
queues preempt to reclaim lent quota, not by priority within a queue), so here nothing is preempted by
priority. Admission is the job's start (the cycle's decision; its start_time), time to admission is
start_time - submit_time as the controller records them, wall is the first submission to the last end.

Kueue's large-scale scenario (the issue's 50,000 workloads over 1,000 ClusterQueues; today's generator has
20 cohorts x 100 queues and 60,000) is `--scenario large`: it runs 20 minutes or more at Kueue's pace and is
not part of `make bench` on this 2-core machine."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.harness import API, Cluster, wait_for  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import standin_agents  # noqa: E402
from lean_submit import submit_on_schedule  # noqa: E402


@dataclass(frozen=True)
class WorkloadSet:
    name: str
    count: int
    interval_s: float
    runtime_s: float
    priority: int
    cpus: int


@dataclass(frozen=True)
class Scenario:
    cohorts: int
    queues_per_cohort: int
    nominal_cpu: int
    borrowing_limit_cpu: int
    sets: tuple[WorkloadSet, ...]
    published: dict


BASELINE = Scenario(5, 6, 20, 100, (
    WorkloadSet("small", 350, 0.1, 0.2, 50, 1),
    WorkloadSet("medium", 100, 0.5, 0.5, 100, 5),
    WorkloadSet("large", 50, 1.2, 1.0, 200, 20)),
    {"wall_s": 351.1, "avg_time_to_admission_s": {"small": 215.5, "medium": 76.8, "large": 6.7},
     "source": "kueue test/performance/scheduler/configs/baseline/rangespec.yaml (mean of 5 runs)"})
LARGE = Scenario(20, 100, 20, 100, (
    WorkloadSet("small", 20, 0.02, 0.05, 50, 1),
    WorkloadSet("medium", 7, 0.05, 0.1, 100, 5),
    WorkloadSet("large", 3, 0.2, 0.2, 200, 20)),
    {"wall_s": 1179, "source": "issue 24 (Kueue's large scenario as the issue cites it)"})
SCENARIOS = {"baseline": BASELINE, "large": LARGE}


def queue_config(scenario: Scenario) -> str:
    lines = ["kill_grace_s = 2", "node_timeout_s = 60", ""]
    for cohort in range(scenario.cohorts):
        for queue in range(scenario.queues_per_cohort):
            lines += ["[[queues]]", f'name = "cq-{queue}-cohort-{cohort}"', f'cohort = "cohort-{cohort}"',
                      f"nominal = {{ cpu = {scenario.nominal_cpu} }}",
                      f"borrowing_limit = {{ cpu = {scenario.borrowing_limit_cpu} }}", ""]
    return "\n".join(lines)


def schedule_of(scenario: Scenario, workdir: str) -> list[tuple[float, dict]]:
    """Every queue's every workload set on its own schedule: one creation per interval, the first after one
    interval, as Kueue's generator does."""
    plan = []
    for cohort in range(scenario.cohorts):
        for queue in range(scenario.queues_per_cohort):
            for wset in scenario.sets:
                body = {"argv": ["sleep", str(wset.runtime_s)], "cpus_per_task": wset.cpus,
                        "queue": f"cq-{queue}-cohort-{cohort}", "priority": wset.priority, "name": wset.name,
                        "workdir": workdir, "user": "perfscale", "output": "/dev/null", "time_limit_s": 600}
                plan += [((k + 1) * wset.interval_s, body) for k in range(wset.count)]
    return sorted(plan, key=lambda item: item[0])


def run(scenario_name: str = "baseline", scenario: Scenario | None = None, records_out: list | None = None) -> dict:
    """Run a scenario (by name, or `scenario` itself); the jobs' accounting records go to `records_out`."""
    scenario = scenario or SCENARIOS[scenario_name]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="perfscale-kueue-") as tmp:
        cluster = Cluster(Path(tmp), nodes=0, config=queue_config(scenario))
        cluster.start_controller()
        agents = standin_agents.spawn(cluster.url, cluster.secret_file, nodes=20, cpus=64, gpus=0,
                                      prefix="perfscale-kueue-", log=Path(tmp) / "agents.log")
        try:
            wait_for(lambda: len(cluster.nodes()) == 20, timeout_s=60, message="stand-in agents registered")
            plan = schedule_of(scenario, tmp)
            wall0 = time.time() + 1.0  # lean_submit's common start
            submitted_jobs = submit_on_schedule(cluster.url, cluster.secret, plan, start_in_s=1.0)
            submitted = time.time()
            ids = [job_id for job_id, _, _ in submitted_jobs]
            lag = max(answered - due for _, due, answered in submitted_jobs)
            wait_for(lambda: not cluster.http.get(f"{API}/jobs").json(), timeout_s=3600, interval_s=1.0,
                     message="every workload finished")
            records = []
            for i in range(0, len(ids), 500):
                chunk = ",".join(map(str, ids[i:i + 500]))
                records += cluster.http.get(f"{API}/accounting", params={"ids": chunk}).json()
            controller_cpu_s = _cpu_s(cluster.controller.pid)
        finally:
            agents.terminate()
            agents.wait(10)
            cluster.stop()
    if records_out is not None:
        records_out.extend(records)
    return report(scenario_name, scenario, records, wall0, submitted, lag, controller_cpu_s, load_before)


def _cpu_s(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def report(name: str, scenario: Scenario, records: list[dict], wall0: float, submitted: float, lag: float,
           controller_cpu_s: float, load_before: float) -> dict:
    by_class: dict[str, list[float]] = {}
    states: dict[str, int] = {}
    for job in records:
        states[job["state"]] = states.get(job["state"], 0) + 1
        if job.get("start_time") is not None:
            by_class.setdefault(job["name"], []).append(job["start_time"] - job["submit_time"])
    last_end = max(job["end_time"] or 0 for job in records)
    tta = {cls: {"avg_s": round(statistics.fmean(v), 3), "p50_s": round(statistics.median(v), 3),
                 "p90_s": round(statistics.quantiles(v, n=10)[-1], 3) if len(v) > 1 else round(v[0], 3),
                 "jobs": len(v)} for cls, v in sorted(by_class.items())}
    return {"bench": f"kueue-{name}", "workloads": len(records),
            "cluster_queues": scenario.cohorts * scenario.queues_per_cohort, "cohorts": scenario.cohorts,
            "wall_s": round(last_end - wall0, 1), "submitting_s": round(submitted - wall0, 1),
            "worst_answer_after_due_s": round(lag, 2), "time_to_admission": tta, "final_states": states,
            "controller_cpu_s": round(controller_cpu_s, 1), "kueue_published": scenario.published,
            "load_avg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="baseline")
    result = run(parser.parse_args().scenario)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
