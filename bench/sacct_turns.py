"""The day's `sacct -a` over a million finished jobs on PostgreSQL, several sacct sources taking turns against
one controller (issue 24, item 4): wall, sacct's own CPU and the controller's CPU per call.

Seeds a private PostgreSQL as bench/sacct_million.py does, starts one controller from this source, then runs
`sacct -a -S <t> -E <t+1d>` (43,383 lines at a million jobs) from each `--src` folder in turn (PYTHONPATH), for
`--turns` rounds, and checks that every source prints the same bytes. A source's sacct may ask for other
fields or page differently; the controller is the same for all.

    python bench/sacct_turns.py --src this=src --src ref=/tmp/ref/src [--turns 4] [--jobs N] [--format F]

Prints one JSON line: per source, every call's wall, sacct CPU and controller CPU (seconds), with the 1-minute
load average before each call."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from sacct_million import CONFIG, PG_SCRIPT, SCRIPTS, SPACING_S, T0, clock, seed, start_postgres  # noqa: E402
from tests.e2e.harness import Cluster  # noqa: E402


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _call(argv: list[str], env: dict[str, str], controller_pid: int) -> tuple[dict, str]:
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    controller_before, load = _cpu_s(controller_pid), os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run([str(SCRIPTS / "sacct"), *argv], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=600, check=False)
    wall = time.perf_counter() - start
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"sacct failed ({done.returncode}): {done.stderr[-2000:]}")
    sacct_cpu = (after_children.ru_utime + after_children.ru_stime
                 - before_children.ru_utime - before_children.ru_stime)
    return ({"wall_s": round(wall, 3), "sacct_cpu_s": round(sacct_cpu, 3),
             "controller_cpu_s": round(_cpu_s(controller_pid) - controller_before, 3), "load": round(load, 2)},
            done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", required=True, help="NAME=src folder of a sacct to time")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--format", help="sacct -o (default: sacct's own)")
    args = parser.parse_args()
    sources = dict(item.split("=", 1) for item in args.src)
    middle = T0 + args.jobs * SPACING_S / 2
    argv = ["-a", "-S", clock(middle), "-E", clock(middle + 86_400), *(["-o", args.format] if args.format else [])]
    result: dict = {"bench": "sacct-turns", "jobs": args.jobs, "argv": argv, "calls": {name: [] for name in sources}}
    with tempfile.TemporaryDirectory(prefix="corral-sacct-turns-") as tmp:
        os.chmod(tmp, 0o755)
        url, pg_env = start_postgres(Path(tmp) / "pg")
        try:
            result["seed_s"] = round(seed(url, args.jobs), 1)
            (Path(tmp) / "c").mkdir()
            cluster = Cluster(Path(tmp) / "c", nodes=0, config=CONFIG, db=url)
            cluster.start_controller(timeout_s=600)
            try:
                env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "SLURM_", "SACCT_"))}
                env |= {"CORRAL_URL": cluster.url, "CORRAL_SECRET_FILE": str(cluster.secret_file),
                        "CORRAL_COMMAND_HELPER": "0", "TZ": "UTC", "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pyc")}
                outputs: dict[str, str] = {}
                for _ in range(2):  # bytecode caches and the controller's and PostgreSQL's first reads
                    for name, src in sources.items():
                        outputs[name] = _call(argv, {**env, "PYTHONPATH": str(Path(src).resolve())},
                                              cluster.controller.pid)[1]
                for _ in range(args.turns):
                    for name, src in sources.items():
                        figures, out = _call(argv, {**env, "PYTHONPATH": str(Path(src).resolve())},
                                             cluster.controller.pid)
                        result["calls"][name].append(figures)
                        if out != outputs[name]:
                            raise SystemExit(f"{name}'s sacct printed something else on a later call")
                        print(name, figures, file=sys.stderr)
                result["lines"] = {name: out.count("\n") for name, out in outputs.items()}
                result["same_output"] = len(set(outputs.values())) == 1
            finally:
                cluster.stop()
        finally:
            subprocess.run([str(PG_SCRIPT), "stop"], env=pg_env, capture_output=True, timeout=120, check=False)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
