"""A self-contained HTML report of one or more replays (one per policy): the setup, the time-limit
model, metric tables and plots embedded as base64 PNG, so the single file can be mailed or archived.

Plots come from `corral.sim.plots` (matplotlib, imported lazily); progress reporting for the replay
itself from `corral.sim.progress` (re-exported here).
"""
from __future__ import annotations

import base64
import html
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from corral.sim import plots
from corral.sim.limits import human_duration
from corral.sim.metrics import GroupMetrics, JobResult, SimMetrics
from corral.sim.progress import NullProgress, Progress, TerminalProgress

__all__ = ["NullProgress", "PolicyRun", "Progress", "TerminalProgress", "render_html", "write_report"]

_STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 75em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #eee; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
p.setup { white-space: pre-wrap; }
"""


@dataclass(frozen=True)
class PolicyRun:
    policy: str
    results: Sequence[JobResult]
    metrics: SimMetrics


def render_html(runs: Sequence[PolicyRun], *, title: str, setup: str, time_limit_model: str = "",
                notes: Iterable[str] = ()) -> str:
    """The report as one HTML string. `setup`: workload, cluster and engine settings in prose;
    `time_limit_model`: `TimeLimitModel.describe()`; `notes`: caveats (e.g. `Workload.notes`)."""
    by_policy = {run.policy: run for run in runs}
    if len(by_policy) != len(runs):
        raise ValueError("policy names must be unique")
    metrics = {p: r.metrics for p, r in by_policy.items()}
    parts = [f"<h1>{_e(title)}</h1>", "<h2>Setup</h2>", f'<p class="setup">{_e(setup)}</p>']
    if time_limit_model:
        parts += ["<h3>Time limits</h3>", f"<p>{_e(time_limit_model)}</p>"]
    notes = list(notes)
    if notes:
        parts += ["<h3>Notes</h3>", "<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>"]
    parts += ["<h2>Summary</h2>", _summary_table(metrics)]
    parts += _plots_html(by_policy, metrics)
    parts += ["<h2>By job size (GPUs)</h2>", _group_table(metrics, "by_size")]
    parts += ["<h2>By queue</h2>", _group_table(metrics, "by_queue")]
    parts += ["<h2>Tenants: GPU-hours vs entitlement</h2>", _tenant_table(metrics)]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{_STYLE}</style></head>\n<body>\n{body}\n</body></html>\n")


def write_report(path: str | os.PathLike[str], runs: Sequence[PolicyRun], *, title: str, setup: str,
                 time_limit_model: str = "", notes: Iterable[str] = ()) -> None:
    page = render_html(runs, title=title, setup=setup, time_limit_model=time_limit_model, notes=notes)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)


def _plots_html(by_policy: Mapping[str, PolicyRun], metrics: Mapping[str, SimMetrics]) -> list[str]:
    results = {p: r.results for p, r in by_policy.items()}
    return [
        "<h2>Job completion time and queueing delay</h2>",
        _img(plots.cdf_plot(results, metric="jct"), "CDF of job completion time"),
        _img(plots.cdf_plot(results, metric="wait"), "CDF of queueing delay"),
        "<h2>Utilization and queue length</h2>",
        _img(plots.timeline_plot(metrics), "GPU utilization and queue length over time"),
        "<h2>Tenant shares</h2>",
        _img(plots.tenant_plot(metrics), "Share of GPU-hours per tenant vs entitlement"),
    ]


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _summary_table(metrics: Mapping[str, SimMetrics]) -> str:
    header = ["policy", "jobs", "makespan", "mean util", "mean queue", "JCT mean", "JCT p50", "JCT p95",
              "JCT p99", "wait mean", "wait p50", "wait p95", "wait p99", "preemptions"]
    rows = []
    for policy, m in metrics.items():
        jct, wait = m.overall.jct_s, m.overall.wait_s
        rows.append([policy, str(m.jobs), human_duration(m.makespan_s), f"{100 * m.mean_utilization:.1f}%",
                     f"{m.mean_queue_length:.1f}", *(_s(v) for v in (jct.mean, jct.median, jct.p95, jct.p99)),
                     *(_s(v) for v in (wait.mean, wait.median, wait.p95, wait.p99)), str(m.preemptions)])
    return _table(header, rows)


def _group_table(metrics: Mapping[str, SimMetrics], attribute: str) -> str:
    header = ["group", "policy", "jobs", "JCT mean", "JCT p50", "JCT p95", "JCT p99", "wait mean", "wait p50",
              "wait p95", "wait p99"]
    groups = sorted({g for m in metrics.values() for g in getattr(m, attribute)},
                    key=lambda g: _group_order(g, metrics, attribute))
    rows = []
    for group in groups:
        for policy, m in metrics.items():
            g: GroupMetrics | None = getattr(m, attribute).get(group)
            if g is not None:
                rows.append([group, policy, str(g.jct_s.count),
                             *(_s(v) for v in (g.jct_s.mean, g.jct_s.median, g.jct_s.p95, g.jct_s.p99)),
                             *(_s(v) for v in (g.wait_s.mean, g.wait_s.median, g.wait_s.p95, g.wait_s.p99))])
    return _table(header, rows)


def _group_order(group: str, metrics: Mapping[str, SimMetrics], attribute: str) -> tuple[int, str]:
    # Keep the metrics' own order (size buckets small to large), then names.
    for m in metrics.values():
        names = list(getattr(m, attribute))
        if group in names:
            return names.index(group), group
    return 0, group


def _tenant_table(metrics: Mapping[str, SimMetrics]) -> str:
    header = ["tenant", "policy", "GPU-hours", "share used", "entitled GPUs", "share entitled", "used / entitled",
              "own capacity used", "preemptions"]
    rows = []
    for tenant in sorted({t for m in metrics.values() for t in m.tenants}):
        for policy, m in metrics.items():
            share = m.tenants.get(tenant)
            if share is not None:
                rows.append([tenant, policy, f"{share.gpu_hours:,.1f}", f"{100 * share.usage_share:.1f}%",
                             str(share.entitled_gpus), f"{100 * share.entitled_share:.1f}%",
                             _ratio(share.usage_vs_entitlement), _pct(share.entitlement_used), str(share.preemptions)])
    return _table(header, rows)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="metrics"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _s(seconds: float) -> str:
    return f"{seconds:,.0f} s"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
