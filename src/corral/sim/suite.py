"""`make sim-report`: the Philly experiments of issue 5 through `corral simulate`'s machinery, writing
reports/philly.html and reports/sim-summary.json; then the openb/FGD experiment (corral.sim.openb_experiment),
appending its rows and writing reports/openb.html."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from corral.sim.cli import _summary, _write_report
from corral.sim.experiment import Policy, run_experiment
from corral.sim.limits import TimeLimitModel
from corral.sim.openb_experiment import suite_rows as openb_rows
from corral.sim.progress import TerminalProgress
from corral.sim.traces.philly import philly_cluster, read_philly

EXPERIMENTS = [
    Policy("philly-fifo-isolated", isolated=True, backfill=False, weight_age=0),
    Policy("philly-best-isolated", isolated=True, backfill=True),
    Policy("philly-best-cohort", isolated=False, backfill=True),
]


def main(argv: list[str] | None = None) -> int:
    out_dir = Path(argv[0] if argv else "reports")
    out_dir.mkdir(parents=True, exist_ok=True)
    model = TimeLimitModel(seed=1)
    workload = model.apply(read_philly())
    cluster = philly_cluster()
    outcomes = []
    for policy in EXPERIMENTS:
        bar = TerminalProgress(policy.name)
        outcomes.append(run_experiment(cluster, workload, policy, progress=bar.update))
    experiments = []
    for outcome in outcomes:
        row = _summary(outcome)
        row["setup"] = f"{row['setup']}. Workload: Philly (Sia/Pollux job list), {len(workload.jobs)} jobs " \
                       f"submitted 2017-10-01..2017-11-30 to the 11 Helios VCs, 8-GPU nodes. {model.describe()}"
        experiments.append(row)
    experiments.extend(openb_rows(out_dir))
    (out_dir / "sim-summary.json").write_text(json.dumps({"experiments": experiments}, indent=1))
    _write_report(str(out_dir / "philly.html"), outcomes, workload, cluster, model)
    json.dump({"experiments": experiments}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
