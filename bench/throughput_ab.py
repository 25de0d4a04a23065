"""bench/throughput.py before and after a change of the nodes' side, in one run, taking turns (base,
change, base, change...) so both see the same load: the "base" rounds run the source of a git revision
(exported with `git archive`, its task leader built from that revision's task_leader.c, put first on
PYTHONPATH for the controller and the agents), the "change" rounds this working tree's.

    python bench/throughput_ab.py --base 393ac09 --jobs 500 --rounds 3"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from leader_start import export_base  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision measured as 'before'")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="throughput-base-") as tmp:
        ways = (("base", export_base(args.base, Path(tmp))), ("change", ROOT / "src"))
        for round_no in range(1, args.rounds + 1):
            for label, source in ways:
                load = os.getloadavg()[0]
                out = subprocess.run([sys.executable, str(ROOT / "bench" / "throughput.py"), str(args.jobs)],
                                     env={**os.environ, "PYTHONPATH": str(source)}, check=True,
                                     capture_output=True, text=True).stdout
                result = json.loads(out.strip().splitlines()[-1])
                print(json.dumps({"round": round_no, "code": label, "load_before": round(load, 2),
                                  "load_after": round(os.getloadavg()[0], 2), **result}), flush=True)


if __name__ == "__main__":
    main()
