"""reports/openb.html: corral's GPU allocation curves on openb beside the FGD authors' published curves
(means over seeds), as a self-contained page with an inline SVG chart."""
from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from corral.sim.traces import fgd_curves

PUBLISHED = {"01-Random": "published Random", "05-BestFit": "published BestFit", "06-FGD": "published FGD"}
_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def published_means() -> dict[str, dict[int, float]]:
    """{label: {arrived %: mean allocation % over seeds}} for the authors' Random, BestFit and FGD."""
    if not fgd_curves.ALLOCATION_PATH.exists():
        return {}
    expected = fgd_curves.read_expected()
    out = {}
    for policy, label in PUBLISHED.items():
        curves = [c for (name, _), c in expected.items() if name == policy]
        out[label] = {k: sum(c[k] for c in curves) / len(curves) for k in range(fgd_curves.MAX_PCT + 1)
                      if all(k in c for c in curves)}
    return out


def render(rows: Sequence[Mapping]) -> str:
    curves = {f"corral {r['policy']}": {int(k): v for k, v in r["curve"].items()} for r in rows}
    curves.update(published_means())
    table = "".join(
        f"<tr><td>{html.escape(r['policy'])}</td><td>{r['alloc_ratio_100']:.2f}</td><td>{r['alloc_ratio_130']:.2f}"
        f"</td><td>{r['seed_wall_s_max']:.2f}</td><td>"
        + ", ".join(f"{s['seed']}: {s['alloc_ratio_130']:.2f}" for s in r["per_seed"]) + "</td></tr>"
        for r in rows)
    published = ", ".join(f"{k} {v:.2f}" for k, v in rows[0]["published_130"].items()) if rows else ""
    setup = html.escape(rows[0]["setup"]) if rows else ""
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>corral simulate: openb</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}td,th{{border:1px solid #ccc;padding:3px 8px}}
table{{border-collapse:collapse}}</style></head><body>
<h1>openb (Alibaba GPU-sharing trace): GPU allocation ratio</h1>
<p>{setup}</p>
<table><tr><th>policy</th><th>alloc % at 100 %</th><th>alloc % at 130 %</th><th>slowest seed (s)</th>
<th>per seed at 130 %</th></tr>{table}</table>
<p>Published means at 130 % (Weng et al., ATC'23): {html.escape(published)}.</p>
{_svg(curves, 50, fgd_curves.MAX_PCT, 50, 100)}
<p>x: arrived GPU requests (% of capacity); y: allocated GPU (% of capacity). Curves are means over the same
seeds; corral's seeds other than 42 use a different random order than the authors' (see the setup).</p>
</body></html>
"""


def _svg(curves: Mapping[str, Mapping[int, float]], x0: int, x1: int, y0: float, y1: float) -> str:
    width, height, pad = 800, 420, 50

    def pt(x: float, y: float) -> str:
        px = pad + (x - x0) / (x1 - x0) * (width - 2 * pad)
        py = height - pad - (min(max(y, y0), y1) - y0) / (y1 - y0) * (height - 2 * pad)
        return f"{px:.1f},{py:.1f}"

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
             f'<rect x="{pad}" y="{pad}" width="{width - 2 * pad}" height="{height - 2 * pad}" fill="none" '
             f'stroke="#888"/>']
    for x in range(x0, x1 + 1, 10):
        parts.append(f'<text x="{pt(x, y0).split(",")[0]}" y="{height - pad + 16}" font-size="11" '
                     f'text-anchor="middle">{x}</text>')
    for y in range(int(y0), int(y1) + 1, 10):
        parts.append(f'<text x="{pad - 6}" y="{float(pt(x0, y).split(",")[1]) + 4}" font-size="11" '
                     f'text-anchor="end">{y}</text>')
    for i, (label, curve) in enumerate(curves.items()):
        color = _COLORS[i % len(_COLORS)]
        dash = ' stroke-dasharray="5,4"' if label.startswith("published") else ""
        points = " ".join(pt(k, v) for k, v in sorted(curve.items()) if x0 <= k <= x1)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6"{dash} points="{points}"/>')
        parts.append(f'<text x="{pad + 10}" y="{pad + 16 + 15 * i}" font-size="12" fill="{color}">'
                     f'{html.escape(label)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def write(path: str | os.PathLike[str], rows: Sequence[Mapping]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(render(rows))
