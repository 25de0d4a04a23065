"""The engine's whole scheduling cycle in process: `CycleDue` (the snapshot, the gates, `schedule`, and the
plan applied to every pending job's reason) over N pending one-GPU jobs on 2 nodes x 8 GPUs that are all
taken, as bench/polling_load.py's memory mode sets it up but without the controller around it (no HTTP, no
store, no event loop), so that the engine's own share of the live cycle can be told from the rest.
The engine is built as the tests build it (tests/engine/builders.py, profile LIVE), the jobs submitted
through its events, one cycle run to start the 16 that fit, the collector settled as the controller
settles it; then the CPU (the thread's) and wall time of `repeats` cycles, medians and best.

    python bench/engine_cycle.py [--pending 100000] [--repeats 10]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.engine.builders import T0, engine_with_nodes, spec  # noqa: E402

from corral import collector  # noqa: E402
from corral.engine import events as ev  # noqa: E402


def measure(pending: int = 100_000, repeats: int = 10) -> dict:
    engine = engine_with_nodes(2, gpus=8).engine
    one_gpu = spec()
    for _ in range(pending):
        engine.handle(ev.JobSubmitted(one_gpu, False), now=T0 + 1)
    engine.handle(ev.CycleDue(), now=T0 + 2)
    collector.settle()
    cpus, walls = [], []
    for k in range(repeats):
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        engine.handle(ev.CycleDue(), now=T0 + 3 + k * 0.1)
        walls.append(time.perf_counter() - wall0)
        cpus.append(time.thread_time() - cpu0)
    stats = engine.last_plan.stats if engine.last_plan is not None else {}
    return {"bench": "engine_cycle", "pending": stats.get("pending"), "started": stats.get("started"),
            "cpu_s": round(statistics.median(cpus), 4), "wall_s": round(statistics.median(walls), 4),
            "min_wall_s": round(min(walls), 4), "repeats": repeats, "load_avg_1m": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    result = measure(args.pending, args.repeats)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
