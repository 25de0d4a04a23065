"""Sustained submit-to-start (bench/sustained_rate.py) before and after a change, in one run, taken in turns
(base, change, base, change...) so both see the same load: the controller of the "base" rounds runs the
source of a git revision (exported with `git archive` to a temporary directory and put first on its
PYTHONPATH), that of the "change" rounds this working tree's. The load generator and the stand-in agents
are the same in both.

    python bench/submit_rate_ab.py --base 4f78185 --rate 1000 --seconds 10 --rounds 2"""
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
from sustained_rate import measure  # noqa: E402


def export_source(revision: str, into: Path) -> Path:
    """The `src` tree of `revision`, under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "src"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def main() -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision measured as 'before'")
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    results = []
    inherited = os.environ.get("PYTHONPATH")
    with tempfile.TemporaryDirectory(prefix="submit-rate-base-") as tmp:
        base_src = export_source(args.base, Path(tmp))
        for round_no in range(1, args.rounds + 1):
            for label, path in (("base", str(base_src)), ("change", str(ROOT / "src"))):
                os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (path, inherited) if p)
                result = {"round": round_no, "code": label,
                          **measure(args.rate, args.seconds, args.processes, args.threads)}
                print(json.dumps(result), flush=True)
                results.append(result)
    if inherited is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = inherited
    return results


if __name__ == "__main__":
    main()
