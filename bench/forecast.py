"""How long one start-time forecast (corral.sim.forecast) takes: the copy taken on the controller's loop
(`capture`) and the forward run (`forecast`), at 1,000 and 10,000 pending jobs; and what a forecast costs
the controller's loop while it runs (`--loop`): how late a 10 ms timer on the loop fires while the forward
run is made in the controller's forecast process (controller/forecasts.py) and, for comparison, in a
thread of the loop's own process (how it was made before: it shares the interpreter lock).

The cluster: `nodes` nodes x 8 GPUs, full of running jobs; the queue: jobs of 1, 2, 4 or 8 GPUs with limits
of 1 to 24 hours, from 50 users whose jobs ran a quarter to all of their limits (the model's history)."""
from __future__ import annotations

import json
import random
import sys
import time

from corral.api.schemas import JobSubmit
from corral.core.config import SchedulerConfig
from corral.engine.config import EngineConfig, PartitionConfig
from corral.sim.driver import SimNode, SimSubmission, Simulation
from corral.sim.forecast import LIVE_QUANTILE, RuntimeModel, capture, forecast

SHAPES = (1, 2, 4, 8)


def queue(nodes: int, pending: int, seed: int = 1) -> Simulation:
    rng = random.Random(seed)
    config = EngineConfig(partitions=(PartitionConfig("gpu", default=True),), scheduler=SchedulerConfig(),
                          kill_grace_s=0.0)
    sim = Simulation(config, [SimNode(f"n{i}", 8) for i in range(nodes)])
    subs = []
    for i in range(nodes * 2 + pending):  # the first ones fill the cluster, the rest wait
        limit = rng.choice((3600, 4 * 3600, 12 * 3600, 24 * 3600))
        request = JobSubmit(name=f"j{i}", user=f"u{i % 50}", argv=["true"], workdir="/", nodes=1,
                            gpus_per_node=rng.choice(SHAPES), cpus_per_task=1, mem_mib=0, time_limit_s=limit)
        subs.append(SimSubmission(0.0, request, limit * rng.uniform(0.25, 1.0)))
    sim.submit(subs)
    sim.run(until_s=0.0)
    return sim


def measure(pending: int, nodes: int, quantile: float = LIVE_QUANTILE) -> dict:
    """One forecast with the live model's quantile (`quantile`: the median, 0.5, is the reference: what the
    live model used before forecast-bluewaters)."""
    sim = queue(nodes, pending)
    model = RuntimeModel(quantile=quantile)
    rng = random.Random(2)
    for i in range(500):
        model.observe(f"u{i % 50}", rng.uniform(0.25, 1.0) * 3600, 3600)
    t0 = time.perf_counter()
    state = capture(sim.engine, 0.0)
    captured = time.perf_counter() - t0
    t0 = time.perf_counter()
    starts = forecast(state, model)
    took = time.perf_counter() - t0
    return {"bench": "forecast", "quantile": quantile, "nodes": nodes, "gpus": nodes * 8, "pending": len(state.pending),
            "running": len(state.jobs) - len(state.pending), "forecast_started": len(starts),
            "capture_s": round(captured, 3), "forecast_s": round(took, 2)}


def loop_delay(pending: int, nodes: int, where: str) -> dict:
    """Timer lateness on the loop during one forecast made in `where`: "process" or "thread"."""
    import asyncio
    import statistics

    from corral.controller.forecasts import ForecastProcess

    sim = queue(nodes, pending)
    state = capture(sim.engine, 0.0)
    process = ForecastProcess()

    async def run() -> tuple[list[float], float]:
        if where == "process":  # the child's start is not the forecast's: a controller keeps its child
            await process.forecast(capture(queue(16, 10).engine, 0.0), RuntimeModel(), 3600.0)
        late: list[float] = []
        done = False

        async def tick() -> None:
            while not done:
                before = time.perf_counter()
                await asyncio.sleep(0.01)
                late.append(time.perf_counter() - before - 0.01)

        ticker = asyncio.create_task(tick())
        t0 = time.perf_counter()
        if where == "process":
            await process.forecast(state, RuntimeModel(), 30 * 86400.0)
        else:
            await asyncio.to_thread(forecast, state, RuntimeModel())
        took = time.perf_counter() - t0
        done = True
        await ticker
        return late, took

    try:
        late, took = asyncio.run(run())
    finally:
        process.close()
    late.sort()
    return {"bench": "forecast-loop", "where": where, "pending": pending, "nodes": nodes,
            "forecast_s": round(took, 2), "ticks": len(late), "ticks_expected": int(took / 0.01),
            "late_ms_p50": round(statistics.median(late) * 1000, 1),
            "late_ms_p99": round(late[int(len(late) * 0.99)] * 1000, 1), "late_ms_max": round(late[-1] * 1000, 1)}


def main(sizes: list[int]) -> list[dict]:
    results = []
    for pending in sizes:
        for quantile in (0.5, LIVE_QUANTILE):  # the reference in the same run
            results.append(measure(pending, nodes=max(16, pending // 10), quantile=quantile))
            print(json.dumps(results[-1]), flush=True)
    return results


if __name__ == "__main__":
    if sys.argv[1:2] == ["--loop"]:
        for size in [int(a) for a in sys.argv[2:]] or [1000]:
            for place in ("thread", "process"):
                print(json.dumps(loop_delay(size, max(16, size // 10), place)), flush=True)
    else:
        main([int(a) for a in sys.argv[1:]] or [1000, 10_000])
