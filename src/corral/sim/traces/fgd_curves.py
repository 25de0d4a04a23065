"""The FGD paper's result curves: how they are computed from a per-arrival log, the authors' published
values (`fgd_expected_results/`), and the golden seed-42 run's per-pod log.

A curve maps k = 0..130 (arrived GPU requests, % of capacity) to a cluster statistic at that moment.
The authors' analysis scripts (experiments/analysis/merge_*_discrete*.py) compute it as follows, and
`allocation_curve`/`fragmentation_curve` do the same so corral's numbers compare like for like:
arrived % = round(arrived_gpu_milli / (10 x total GPUs)) with Python's round-half-even; the value at
k is the mean over the arrivals whose arrived % equals k (or, when there are none, lies in k-1..k+1;
k is left out when that is empty too). Allocation rounds each arrival's % to 2 decimals before the
mean; fragmentation averages raw milli-GPUs, then converts to % of capacity. On the golden run both
reproduce the published FGD seed-42 rows exactly (the fragmentation-ratio curve to 1e-12).
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from corral.sim.traces._csv import TRACES_DIR, iter_rows
from corral.sim.traces.fgd import GOLDEN_PATH

RESULTS_DIR = TRACES_DIR / "alibaba-gpu-v2023" / "fgd_expected_results"
ALLOCATION_PATH = RESULTS_DIR / "analysis_allo_discrete.csv.gz"
FRAGMENTATION_PATH = RESULTS_DIR / "analysis_frag_discrete.csv.gz"
FRAG_RATIO_PATH = RESULTS_DIR / "analysis_frag_ratio_discrete.csv.gz"
MAX_PCT = 130
_NODE_PREFIX = re.compile(r"^\d{4}-")  # the simulator prefixes node names with a random rank


@dataclass(frozen=True, slots=True)
class GoldenRow:
    idx: int
    pod: str
    node: str | None  # openb node name (the simulator's "NNNN-" prefix removed); None: unscheduled
    frag_milli: float  # fragmented GPU milli after this arrival (FGD's "origin" measure)
    frag_ratio_pct: float  # fragmented share of idle GPUs
    used_nodes: int
    used_gpus: int
    used_gpu_milli: int
    arrived_gpu_milli: int


def read_golden_run(path: str | os.PathLike[str] = GOLDEN_PATH) -> list[GoldenRow]:
    """The golden run's per-arrival log (10,866 rows for seed 42)."""
    rows = []
    columns = ("idx", "pod", "node", "frag_milli_origin", "frag_ratio_origin_pct", "used_nodes", "used_gpus",
               "used_gpu_milli", "arrived_gpu_milli")
    for row in iter_rows(path, columns):
        node = _NODE_PREFIX.sub("", row.text("node")) or None
        rows.append(GoldenRow(row.integer("idx"), row.text("pod"), node, row.number("frag_milli_origin"),
                              row.number("frag_ratio_origin_pct"), row.integer("used_nodes"),
                              row.integer("used_gpus"), row.integer("used_gpu_milli"),
                              row.integer("arrived_gpu_milli")))
    return rows


def allocation_curve(arrived_gpu_milli: Sequence[int], used_gpu_milli: Sequence[int],
                     total_gpus: int) -> dict[int, float]:
    """GPU allocation ratio (%) at each arrived % of capacity, as the authors compute it."""
    per_arrival = [round(used / total_gpus / 10, 2) for used in used_gpu_milli]
    return _curve(arrived_gpu_milli, per_arrival, total_gpus, lambda mean: round(mean, 2))


def fragmentation_curve(arrived_gpu_milli: Sequence[int], frag_gpu_milli: Sequence[float],
                        total_gpus: int) -> dict[int, float]:
    """Fragmented GPUs as % of capacity at each arrived % of capacity, as the authors compute it."""
    return _curve(arrived_gpu_milli, list(frag_gpu_milli), total_gpus,
                  lambda mean: round(100 * mean / 1000 / total_gpus, 2))


def fragmentation_ratio_curve(arrived_gpu_milli: Sequence[int], frag_ratio_pct: Sequence[float],
                              total_gpus: int) -> dict[int, float]:
    """Fragmented share of idle GPUs (%), unrounded mean per arrived %, as the authors compute it."""
    return _curve(arrived_gpu_milli, list(frag_ratio_pct), total_gpus, lambda mean: mean)


def _curve(arrived_gpu_milli: Sequence[int], values: Sequence[float], total_gpus: int,
           finish: Callable[[float], float]) -> dict[int, float]:
    if len(arrived_gpu_milli) != len(values):
        raise ValueError(f"{len(arrived_gpu_milli)} arrivals but {len(values)} values")
    by_pct: dict[int, list[float]] = {}
    for arrived, value in zip(arrived_gpu_milli, values, strict=True):
        # Python's round() is half-to-even, like the pandas .apply(round) the authors used.
        by_pct.setdefault(int(round(arrived / total_gpus / 10, 0)), []).append(value)
    curve = {}
    for pct in range(MAX_PCT + 1):
        chosen = by_pct.get(pct) or [v for k in (pct - 1, pct, pct + 1) for v in by_pct.get(k, ())]
        if chosen:
            curve[pct] = finish(sum(chosen) / len(chosen))
    return curve


def read_expected(path: str | os.PathLike[str] = ALLOCATION_PATH) -> dict[tuple[str, int], dict[int, float]]:
    """{(policy, seed): {pct: value}} from one of the authors' `analysis_*_discrete.csv.gz` files.

    Policies are named as there ("01-Random" .. "06-FGD"); empty cells are left out.
    """
    out: dict[tuple[str, int], dict[int, float]] = {}
    for row in iter_rows(path, ("workload", "sc_policy", "seed", "0")):
        curve = {int(k): row.number(k, minimum=None) for k in row.values if k.isdigit() and row.text(k)}
        out[(row.text("sc_policy"), row.integer("seed"))] = curve
    return out


def mean_at(expected: dict[tuple[str, int], dict[int, float]], policy: str, pct: int = MAX_PCT) -> float:
    """Mean over seeds of a policy's value at `pct` (e.g. FGD's 95.39 % allocation at 130 %)."""
    values = [curve[pct] for (name, _), curve in expected.items() if name == policy and pct in curve]
    if not values:
        raise KeyError(f"no values for policy {policy!r} at {pct}%")
    return sum(values) / len(values)
