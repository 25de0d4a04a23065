"""One scheduling cycle on 1,000 nodes x 8 GPUs with 10,000 and 100,000 pending jobs of mixed shapes
(1 GPU up to 64-GPU gangs), the cluster 90% busy. Reports the median cycle time and peak memory."""
from __future__ import annotations

import gc
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from workload import cluster_snapshot  # noqa: E402

from corral.core.config import SchedulerConfig  # noqa: E402
from corral.core.scheduler import schedule  # noqa: E402


def measure(pending: int, repeats: int = 5, nodes: int = 1000) -> dict:
    snap = cluster_snapshot(nodes, pending)
    config = SchedulerConfig()
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        plan = schedule(snap, config)
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    schedule(snap, config)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "bench": "cycle", "nodes": nodes, "gpus": nodes * 8, "pending": pending,
        "running": len(snap.running), "started": plan.stats["started"],
        "reservations": plan.stats["reservations"], "max_reservations": config.max_reservations,
        "median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
        "peak_alloc_mib": round(peak / 2**20, 1), "repeats": repeats,
    }


def main() -> list[dict]:
    results = [measure(10_000), measure(100_000)]
    for r in results:
        print(json.dumps(r))
    return results


if __name__ == "__main__":
    main()
