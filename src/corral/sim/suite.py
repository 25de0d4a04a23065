"""`make sim-report`: the Philly experiments of issue 5 through `corral simulate`'s machinery, writing
reports/philly.html, reports/philly-calibrated.html and reports/sim-summary.json; then the openb/FGD
experiment (corral.sim.openb_experiment), appending its rows and writing reports/openb.html; then the
start-time forecast experiments (corral.sim.forecast_experiment: `forecast-philly`, reports/forecast-philly.html;
corral.sim.forecast_bluewaters: `forecast-bluewaters`, on real user time limits, reports/forecast-bluewaters.html).

Two workloads. *Raw*: the Sia/Pollux Philly job list as it is (68,503 jobs in the Helios window and VCs).
*Calibrated*: the same jobs with every runtime multiplied by one factor, DURATION_SCALE, chosen so that the
mean runtime equals the Helios job list's. The Helios paper's FIFO figures give that mean without any
simulation: with FIFO and no backfill a job runs exactly its duration, so avg JCT - avg queueing delay =
86,072 - 56,531 = 29,541 s, against 11,481 s in the Sia/Pollux list (whose preprocessing dropped jobs of
1,000 GPU-hours or more and jobs under 60 s). Arrivals, GPU counts and VCs are untouched; time limits are
modelled after scaling.
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from corral.sim.cli import _summary, _write_report
from corral.sim.experiment import Policy, run_experiment
from corral.sim.forecast_bluewaters import suite_row as forecast_bluewaters_row
from corral.sim.forecast_experiment import suite_row as forecast_row
from corral.sim.limits import TimeLimitModel
from corral.sim.openb_experiment import suite_rows as openb_rows
from corral.sim.progress import stream_progress
from corral.sim.share import share_guarantee
from corral.sim.traces.philly import philly_cluster, read_philly
from corral.sim.workload import Workload

PAPER_FIFO_JCT_S, PAPER_FIFO_QUEUE_S = 86_072, 56_531
RAW_MEAN_RUNTIME_S = 11_480.68  # the 68,503 jobs of read_philly()
DURATION_SCALE = round((PAPER_FIFO_JCT_S - PAPER_FIFO_QUEUE_S) / RAW_MEAN_RUNTIME_S, 3)  # 2.573

STOP_DELAY_S = 30.0  # a preempted (or killed) job's processes take this long to exit

EXPERIMENTS = [
    Policy("philly-fifo-isolated", isolated=True, backfill=False, weight_age=0),
    # Backfill with user time limits, and multifactor priority: age, and job size favouring small requested
    # GPU time (GPUs x time limit; Slurm's PriorityFavorSmall on that size). No runtime oracle.
    Policy("philly-best-isolated", isolated=True, backfill=True, weight_age=10_000, weight_job_size=10_000,
           favor_small=True),
    Policy("philly-best-cohort", isolated=False, backfill=True, weight_age=10_000, weight_job_size=10_000,
           favor_small=True),
]
PAPER = ("Helios (SC'21) on its own Philly job list, VCs isolated, no backfill: FIFO 86,072 s, QSSF 37,324 s, "
         "SJF (oracle) 34,272 s, SRTF (oracle, preemptive) 30,683 s")


def scaled(workload: Workload, factor: float) -> Workload:
    jobs = [replace(job, duration_s=job.duration_s * factor) for job in workload.jobs]
    return workload.with_jobs(jobs, f"every runtime x {factor:g} (calibration to the Helios job list's mean "
                                    f"runtime, {PAPER_FIFO_JCT_S - PAPER_FIFO_QUEUE_S:,} s)")


def main(argv: list[str] | None = None) -> int:
    out_dir = Path(argv[0] if argv else "reports")
    out_dir.mkdir(parents=True, exist_ok=True)
    model = TimeLimitModel(seed=1)
    cluster = philly_cluster()
    nominal = cluster.queue_gpus()
    raw = read_philly()
    workloads = [("", model.apply(raw), "Philly (Sia/Pollux job list) as recorded"),
                 ("-calibrated", model.apply(scaled(raw, DURATION_SCALE)),
                  (f"Philly (Sia/Pollux job list), every runtime x {DURATION_SCALE} so that the mean runtime is "
                   f"the Helios job list's ({PAPER_FIFO_JCT_S - PAPER_FIFO_QUEUE_S:,} s = the paper's FIFO JCT "
                   f"minus its FIFO queueing delay; raw mean {RAW_MEAN_RUNTIME_S:,.0f} s); arrivals, GPU counts "
                   f"and VCs unchanged"))]
    experiments = []
    for suffix, workload, what in workloads:
        outcomes = []
        for base in EXPERIMENTS:
            policy = replace(base, name=base.name + suffix)
            bar = stream_progress(policy.name)
            outcome = run_experiment(cluster, workload, policy, stop_delay_s=STOP_DELAY_S, progress=bar.update)
            outcomes.append(outcome)
            row = _summary(outcome)
            row["setup"] = (f"{row['setup']}. Workload: {what}; {len(workload.jobs)} jobs submitted "
                            f"2017-10-01..2017-11-30 to the 11 Helios VCs, 2,816 GPUs on 8-GPU nodes. "
                            f"{model.describe()} A preempted job takes {STOP_DELAY_S:g} s to stop and is requeued "
                            f"(it restarts from the beginning). Reference: {PAPER}.")
            row["per_vc_avg_jct_s"] = {q: round(g.jct_s.mean) for q, g in outcome.metrics.by_queue.items()}
            row["per_vc_avg_wait_s"] = {q: round(g.wait_s.mean) for q, g in outcome.metrics.by_queue.items()}
            shares = share_guarantee(outcome.results, nominal, grace_s=600.0)
            row["share_guarantee"] = {
                "definition": "per VC: fraction of the replay's span during which its running GPUs were below "
                              "min(its demand, its nominal GPUs), counting only the part of each such spell "
                              "beyond a 600 s grace period",
                "worst_vc_fraction": round(max((s.short_fraction for s in shares), default=0.0), 5),
                "per_vc": {s.queue: {"fraction": round(s.short_fraction, 5),
                                     "longest_spell_s": round(s.longest_short_s),
                                     "mean_shortfall_gpus": round(s.mean_shortfall_gpus, 1)} for s in shares}}
            experiments.append(row)
        name = "philly" + suffix
        _write_report(str(out_dir / f"{name}.html"), outcomes, workload, cluster, model)
    experiments.extend(openb_rows(out_dir))
    experiments.append(forecast_row(out_dir, DURATION_SCALE))
    experiments.append(forecast_bluewaters_row(out_dir))
    (out_dir / "sim-summary.json").write_text(json.dumps({"experiments": experiments}, indent=1))
    json.dump({"experiments": experiments}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
