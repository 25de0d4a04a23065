"""`corral simulate`: a workload trace through the production engine under chosen policies, with
metrics as JSON and a self-contained HTML report."""
from __future__ import annotations

import json
import sys
from pathlib import Path

POLICIES = {
    "fifo-isolated": dict(isolated=True, backfill=False, weight_age=0),
    "backfill-isolated": dict(isolated=True, backfill=True),
    "backfill-cohort": dict(isolated=False, backfill=True),
}


def load_workload(trace: str, path: str | None, max_jobs: int | None, seed: int):
    from corral.sim.limits import TimeLimitModel

    if trace == "philly":
        from corral.sim.traces.philly import philly_cluster, read_philly

        workload, cluster = read_philly(path) if path else read_philly(), philly_cluster()
    elif trace == "accounting":
        from corral.sim.traces.accounting import read_accounting

        workload, cluster = read_accounting(_need(path, trace)), None
    elif trace == "sacct":
        from corral.sim.traces.sacct import read_sacct

        workload, cluster = read_sacct(_need(path, trace)), None
    else:
        raise SystemExit(f"corral simulate: error: unknown trace {trace!r} (philly, accounting, sacct)")
    model = TimeLimitModel(seed=seed)
    workload = model.apply(workload)
    if max_jobs:
        workload = workload.head(max_jobs)
    return workload, cluster, model


def _need(path: str | None, trace: str) -> str:
    if not path:
        raise SystemExit(f"corral simulate: error: --trace {trace} needs --trace-file")
    return path


def uniform_cluster(nodes: int, gpus_per_node: int, queues: list[str]):
    from corral.sim.workload import Cluster

    per_queue = {q: max(1, nodes // len(queues)) for q in queues}
    return Cluster.uniform("uniform", per_queue, gpus_per_node=gpus_per_node, cpus_per_node=128,
                           mem_per_node_mib=1_024_000, source=f"{nodes} nodes x {gpus_per_node} GPUs")


def simulate(trace: str, trace_file: str | None, policies: list[str], max_jobs: int | None, seed: int,
             nodes: int, gpus_per_node: int, report: str | None, progress: bool) -> dict:
    from corral.sim.experiment import Policy, run_experiment
    from corral.sim.progress import NullProgress, TerminalProgress

    workload, cluster, model = load_workload(trace, trace_file, max_jobs, seed)
    if cluster is None:
        cluster = uniform_cluster(nodes, gpus_per_node, sorted({j.queue for j in workload.jobs}))
    outcomes = []
    for name in policies:
        if name not in POLICIES:
            raise SystemExit(f"corral simulate: error: unknown policy {name!r} ({', '.join(POLICIES)})")
        bar = TerminalProgress(name) if progress else NullProgress()
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


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="corral simulate", description=__doc__)
    p.add_argument("--trace", default="philly", help="philly | accounting | sacct | openb")
    p.add_argument("--trace-file", default=None, help="the trace (philly: default shared/traces copy)")
    p.add_argument("--policy", action="append", dest="policies",
                   help=f"one of {', '.join(POLICIES)} (openb: fgd+cpu, fgd, bestfit); repeatable")
    p.add_argument("--max-jobs", type=int, default=None, help="only the first N jobs")
    p.add_argument("--seed", type=int, default=1, help="time-limit model seed")
    p.add_argument("--nodes", type=int, default=16, help="cluster size for traces without one")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--report", default=None, help="write a self-contained HTML report here")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--openb-pods", default=None,
                   help="openb: the pod list (csv or csv.gz; default: the trace's openb_pod_list_default)")
    p.add_argument("--openb-nodes", default=None, help="openb: the node list (default: the 1,213 GPU nodes)")
    p.add_argument("--seeds", default="42-51", help="openb: arrival-order seeds, e.g. 42-51 or 42,45")
    args = p.parse_args(argv)
    if args.trace == "openb":
        return _openb(args)
    summary = simulate(args.trace, args.trace_file, args.policies or ["backfill-isolated"], args.max_jobs,
                       args.seed, args.nodes, args.gpus_per_node, args.report, not args.no_progress)
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0


def _openb(args) -> int:
    """The FGD paper's experiment (see corral.sim.openb_experiment): allocation ratio at 100/130 %."""
    from corral.sim import openb_experiment, openb_report

    policies = args.policies or ["fgd+cpu"]
    for name in policies:
        if name not in openb_experiment.POLICIES:
            raise SystemExit(f"corral simulate: error: unknown openb policy {name!r} "
                             f"({', '.join(openb_experiment.POLICIES)})")
    rows = openb_experiment.run(policies, openb_experiment.parse_seeds(args.seeds), args.openb_pods,
                                args.openb_nodes)
    if args.report:
        openb_report.write(args.report, rows)
    json.dump({"trace": "openb", "experiments": [{k: v for k, v in r.items() if k != "curve"} for r in rows]},
              sys.stdout, indent=1)
    print()
    return 0
