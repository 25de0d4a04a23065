"""bench/throughput.py for one or more earlier revisions and this tree, in one run, taking turns (each base,
then the change, round after round) so all see the same load. Each base runs from its own tree (`git
archive` of its src, tests and bench: its own controller, agents and test harness; its task leader built
from its own task_leader.c where it has one) with this tree's bench/throughput.py, so every code is
measured the same way (the CPU per job by part, the cluster's cpuacct cgroup).

    python bench/throughput_ab.py --base 4ad6e58 --base 393ac09 --jobs 500 --rounds 3"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export_tree(revision: str, into: Path) -> Path:
    """`revision`'s src, tests and bench under `into`, its task leader built, this tree's throughput bench."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "src", "tests", "bench"], check=True,
                             capture_output=True).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    if (into / "src" / "corral" / "agent" / "task_leader.c").exists():
        subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "-C", str(into),
                        "src/corral/agent/corral-task-leader"], check=True)
    shutil.copy(ROOT / "bench" / "throughput.py", into / "bench" / "throughput.py")
    return into


def run_once(tree: Path, jobs: int) -> dict:
    out = subprocess.run([sys.executable, str(tree / "bench" / "throughput.py"), str(jobs)],
                         env={**os.environ, "PYTHONPATH": str(tree / "src")}, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", action="append", required=True, help="a git revision measured too (repeatable)")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="throughput-base-") as tmp:
        ways = [(base, export_tree(base, Path(tmp) / base)) for base in args.base] + [("change", ROOT)]
        for round_no in range(1, args.rounds + 1):
            for label, tree in ways:
                load = os.getloadavg()[0]
                result = run_once(tree, args.jobs)
                print(json.dumps({"round": round_no, "code": label, "load_before": round(load, 2),
                                  "load_after": round(os.getloadavg()[0], 2), **result}), flush=True)


if __name__ == "__main__":
    main()
