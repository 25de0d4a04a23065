"""`corral simulate`: a workload trace through the production engine under chosen policies, with
metrics as JSON and a self-contained HTML report."""
from __future__ import annotations

from pathlib import Path
from typing import Any

POLICIES: dict[str, dict[str, Any]] = {
    "fifo-isolated": dict(isolated=True, backfill=False, weight_age=0),
    "backfill-isolated": dict(isolated=True, backfill=True),
    "backfill-cohort": dict(isolated=False, backfill=True),
}
# Replayed through the engine; openb has its own experiment.
REPLAY_TRACES = ("philly", "bluewaters", "accounting", "sacct")
TRACES = (*REPLAY_TRACES, "openb")


def load_workload(trace: str, path: str | None, max_jobs: int | None, seed: int):
    """The trace's jobs with modelled time limits, and its cluster where the trace has one.

    Raises OSError for a file that cannot be read and ValueError for anything else wrong with it."""
    from corral.sim.limits import TimeLimitModel

    if trace == "philly":
        from corral.sim.traces.philly import philly_cluster, read_philly

        workload, cluster = read_philly(path) if path else read_philly(), philly_cluster()
    elif trace == "bluewaters":
        from corral.sim.traces.bluewaters import bluewaters_cluster, fit_to, read_bluewaters

        cluster = bluewaters_cluster()
        workload = fit_to(read_bluewaters(path) if path else read_bluewaters(), cluster)
    elif trace == "accounting":
        from corral.sim.traces.accounting import read_accounting

        workload, cluster = read_accounting(_need(path, trace)), None
    elif trace == "sacct":
        from corral.sim.traces.sacct import read_sacct

        workload, cluster = read_sacct(_need(path, trace)), None
    else:
        raise ValueError(f"unknown trace {trace!r} for a replay ({', '.join(REPLAY_TRACES)})")
    model = TimeLimitModel(seed=seed)
    workload = model.apply(workload)
    if max_jobs:
        workload = workload.head(max_jobs)
    return workload, cluster, model


def _need(path: str | None, trace: str) -> str:
    if not path:
        raise ValueError(f"--trace {trace} needs --trace-file")
    return path


def uniform_cluster(nodes: int, gpus_per_node: int, queues: list[str]):
    from corral.sim.workload import Cluster

    per_queue = {q: max(1, nodes // len(queues)) for q in queues}
    return Cluster.uniform("uniform", per_queue, gpus_per_node=gpus_per_node, cpus_per_node=128,
                           mem_per_node_mib=1_024_000, source=f"{nodes} nodes x {gpus_per_node} GPUs")


def simulate(trace: str, trace_file: str | None, policies: list[str], max_jobs: int | None, seed: int,
             nodes: int, gpus_per_node: int, report: str | None, progress: bool) -> dict:
    from corral.sim.experiment import Policy, run_experiment
    from corral.sim.progress import NullProgress, stream_progress

    check_policies(policies, POLICIES)
    from corral import collector

    workload, cluster, model = load_workload(trace, trace_file, max_jobs, seed)
    if cluster is None:
        cluster = uniform_cluster(nodes, gpus_per_node, sorted({j.queue for j in workload.jobs}))
    collector.settle()  # the trace is loaded: no cycle of the replay walks it again
    outcomes = []
    for name in policies:
        bar = stream_progress(name) if progress else NullProgress()
        outcomes.append(run_experiment(cluster, workload, Policy(name, **POLICIES[name]), progress=bar.update))
    summary = {"trace": trace, "jobs": len(workload.jobs), "gpus": cluster.total_gpus,
               "time_limits": model.describe(), "experiments": [_summary(o) for o in outcomes]}
    if report:
        _write_report(report, outcomes, workload, cluster, model)
    return summary


def _summary(outcome) -> dict:
    m = outcome.metrics.to_dict(series_points=0)
    return {"name": outcome.policy.name, "setup": outcome.policy.describe(), "wall_s": round(outcome.wall_s, 2),
            "cycles": outcome.cycles, "unfinished": outcome.unfinished,
            "refused": len(outcome.refused),
            "avg_jct_s": m["overall"]["jct_s"]["mean"], "p99_jct_s": m["overall"]["jct_s"]["p99"],
            "avg_wait_s": m["overall"]["wait_s"]["mean"], "gpu_util": m["mean_utilization"]}


def _write_report(path: str, outcomes, workload, cluster, model) -> None:
    from corral.sim.report import PolicyRun, write_report

    runs = [PolicyRun(o.policy.name, o.results, o.metrics) for o in outcomes]
    setup = f"{workload.name}: {len(workload.jobs)} jobs; cluster {cluster.name}: {cluster.total_gpus} GPUs. " + \
        " ".join(o.policy.describe() for o in outcomes)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_report(path, runs, title=f"corral simulate: {workload.name}", setup=setup,
                 time_limit_model=model.describe(), notes=workload.notes)


def check_policies(names: list[str], known) -> None:
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r} (this trace's: {', '.join(known)})")


def simulate_openb(policies: list[str], seeds: str, pods: str | None, nodes: str | None, report: str | None,
                   ) -> dict:
    """The FGD paper's experiment (see corral.sim.openb_experiment): allocation ratio at 100/130 %.
    Each experiment's `notes` say where a seed did not run as asked (seed 42 on another pod list)."""
    from corral.sim import openb_experiment, openb_report

    check_policies(policies, openb_experiment.POLICIES)
    seed_list = openb_experiment.parse_seeds(seeds)
    rows = openb_experiment.run(policies, seed_list, pods, nodes)
    if report:
        openb_report.write(report, rows)
    return {"trace": "openb", "experiments": [{k: v for k, v in r.items() if k != "curve"} for r in rows]}
