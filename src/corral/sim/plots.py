"""PNG plots of replay results. matplotlib is imported only here and only when a plot is drawn, and
only its object API (Figure + Agg canvas): no pyplot global state, no GUI backend, safe in threads."""
from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from corral.sim.metrics import JobResult, SimMetrics

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOT_POINTS = 2000  # series are resampled to this many time-weighted bins before plotting
_HOUR_S = 3600.0


def _figure(width_in: float = 7.0, height_in: float = 4.0, rows: int = 1) -> tuple[Figure, list]:
    from matplotlib.figure import Figure  # lazy: importing matplotlib costs ~0.5 s

    fig = Figure(figsize=(width_in, height_in), dpi=100, layout="constrained")
    axes = [fig.add_subplot(rows, 1, i + 1) for i in range(rows)]
    return fig, axes


def _png(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer)
    return buffer.getvalue()


def cdf_plot(results_by_policy: Mapping[str, Sequence[JobResult]], *, metric: str = "jct") -> bytes:
    """CDF of job completion time ("jct") or queueing delay ("wait"), one line per policy."""
    if metric not in ("jct", "wait"):
        raise ValueError(f"metric {metric!r}: 'jct' or 'wait'")
    fig, (ax,) = _figure()
    for policy, results in results_by_policy.items():
        values = np.sort([r.jct_s if metric == "jct" else r.wait_s for r in results])
        if len(values):
            ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=policy)
    # symlog: waits are often exactly 0, which a log axis cannot show.
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("job completion time (s)" if metric == "jct" else "queueing delay (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.01)
    ax.grid(True, alpha=0.3)
    if results_by_policy:
        ax.legend(loc="lower right")
    return _png(fig)


def timeline_plot(metrics_by_policy: Mapping[str, SimMetrics]) -> bytes:
    """GPU utilization (top) and queue length (bottom) over time, one line per policy."""
    fig, (util_ax, queue_ax) = _figure(height_in=5.5, rows=2)
    for policy, metrics in metrics_by_policy.items():
        for ax, series, scale in ((util_ax, metrics.utilization, 100.0), (queue_ax, metrics.queue_length, 1.0)):
            sampled = series.resample(PLOT_POINTS)
            origin_s = series.times_s[0]
            times_h = [(t - origin_s) / _HOUR_S for t in (*sampled.times_s, sampled.end_s)]
            values = [v * scale for v in (*sampled.values, sampled.values[-1])]
            ax.step(times_h, values, where="post", label=policy, linewidth=0.8)
    util_ax.set_ylabel("GPUs in use (%)")
    util_ax.set_ylim(0, 105)
    queue_ax.set_ylabel("jobs waiting")
    queue_ax.set_xlabel("hours since the first submission")
    for ax in (util_ax, queue_ax):
        ax.grid(True, alpha=0.3)
    if metrics_by_policy:
        util_ax.legend(loc="upper right")
    return _png(fig)


def tenant_plot(metrics_by_policy: Mapping[str, SimMetrics]) -> bytes:
    """Each tenant's share of the GPU-hours used, per policy, against its share of entitled GPUs."""
    tenants = sorted({t for m in metrics_by_policy.values() for t in m.tenants})
    fig, (ax,) = _figure(width_in=max(7.0, 0.6 * len(tenants) + 2))
    positions = np.arange(len(tenants))
    width = 0.8 / (len(metrics_by_policy) + 1)
    for i, (policy, metrics) in enumerate(metrics_by_policy.items()):
        shares = [100 * metrics.tenants[t].usage_share if t in metrics.tenants else 0.0 for t in tenants]
        ax.bar(positions + i * width, shares, width, label=f"{policy}: used")
    first = next(iter(metrics_by_policy.values()), None)
    if first is not None:
        entitled = [100 * first.tenants[t].entitled_share if t in first.tenants else 0.0 for t in tenants]
        ax.bar(positions + len(metrics_by_policy) * width, entitled, width, label="entitlement",
               color="none", edgecolor="black", hatch="//")
    ax.set_xticks(positions + 0.4 - width / 2, tenants, rotation=45, ha="right")
    ax.set_ylabel("share of GPU-hours / of GPUs (%)")
    ax.grid(True, axis="y", alpha=0.3)
    if tenants:
        ax.legend()
    return _png(fig)
