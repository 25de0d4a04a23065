"use strict";
// Charts as inline SVG: the GPU heatmap (one cell per GPU, a row per node), line charts over time and
// paired bars. No library: a few shapes and text.

const SVG_NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  for (const child of children) {
    if (child === null || child === undefined) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const COLOURS = {free: "#e6ebf1", unsampled: "#94a3b8", drained: "#f0ad4e", down: "#d9534f"};

// An allocated GPU's blue: light at 0 % busy, deep at 100 %.
function busyColour(pct) {
  return `hsl(217, 75%, ${80 - Math.round(Math.min(100, Math.max(0, pct)) * 0.45)}%)`;
}

function draining(state) { return state === "drained" || state === "draining"; }

// A GPU's colour: on a node that is down, red; held by a job, blue (darker with the job's sampled
// utilisation; a draining node's keep their jobs until they end); otherwise free, or drained.
function gpuColour(cell) {
  if (cell.state === "down") return COLOURS.down;
  if (!cell.job) return draining(cell.state) ? COLOURS.drained : COLOURS.free;
  if (cell.util === null || cell.util === undefined) return COLOURS.unsampled;
  return busyColour(cell.util);
}

// rows: [{node, state, note, cells: [{index, model, job, user, util, state}]}]
function heatmap(rows) {
  const cell = 26, gap = 4, label = 90, note = 220;
  const widest = Math.max(1, ...rows.map((r) => r.cells.length));
  const width = label + widest * (cell + gap) + note;
  const height = rows.length * (cell + gap) + 4;
  const chart = svg("svg", {class: "heatmap", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "GPUs by node"});
  rows.forEach((row, y) => {
    const top = y * (cell + gap) + 2;
    chart.append(svg("text", {x: 0, y: top + cell * 0.72, class: "label"}, row.node));
    row.cells.forEach((gpu, x) => {
      const title = gpu.job
        ? `${row.node} GPU ${gpu.index} (${gpu.model}): job ${gpu.job}${gpu.user ? ` of ${gpu.user}` : ""}` +
          (gpu.util === null || gpu.util === undefined ? "" : `, ${gpu.util}% busy`)
        : `${row.node} GPU ${gpu.index} (${gpu.model}): ${gpu.state === "idle" || gpu.state === "mixed" || gpu.state === "allocated" ? "free" : gpu.state}`;
      chart.append(svg("rect", {x: label + x * (cell + gap), y: top, width: cell, height: cell, rx: 3,
        fill: gpuColour(gpu), "data-gpu": `${row.node}:${gpu.index}`, "data-job": gpu.job || "",
        ...(draining(row.state) ? {stroke: "#d97706", "stroke-width": 2} : {})},
      svg("title", {}, title)));
    });
    chart.append(svg("text", {x: label + row.cells.length * (cell + gap) + 8, y: top + cell * 0.72, class: "axis"},
      row.note || ""));
  });
  return chart;
}

function niceMax(value) {
  if (value <= 0) return 1;
  const step = Math.pow(10, Math.floor(Math.log10(value)));
  for (const m of [1, 2, 2.5, 5, 10]) if (value <= m * step) return m * step;
  return 10 * step;
}

function clock(epoch, seconds) {
  const d = new Date(epoch * 1000);
  const two = (n) => String(n).padStart(2, "0");
  return `${two(d.getHours())}:${two(d.getMinutes())}${seconds ? `:${two(d.getSeconds())}` : ""}`;
}

// The y axis: a round step (1, 2, 2.5 or 5 times a power of ten; whole numbers for counts) and a top
// that is a whole number of steps.
function yAxis(top, integer) {
  let step = niceMax(top / 4);
  if (integer) step = Math.max(1, Math.round(step));
  return {step, max: Math.max(step, Math.ceil(top / step - 1e-9) * step)};
}

// series: [{name, colour, points: [[epoch, value], ...]}]; opts: {yMax, unit, step, integer, until (epoch: the
// time axis reaches it), width, height, label, empty}
function lineChart(series, opts = {}) {
  const width = opts.width || 640, height = opts.height || 180;
  const left = 52, right = 12, top = 12, bottom = 26;
  const all = series.flatMap((s) => s.points);
  const chart = svg("svg", {class: "line-chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": opts.label || "chart"});
  if (!all.length) {
    chart.append(svg("text", {x: width / 2, y: height / 2, class: "empty-chart", "text-anchor": "middle"},
      opts.empty || "no samples yet"));
    return chart;
  }
  const t0 = Math.min(...all.map((p) => p[0]));
  const t1 = Math.max(...all.map((p) => p[0]), opts.until || 0, t0 + 1);
  const axis = opts.yMax ? {step: opts.yMax / 4, max: opts.yMax} : yAxis(Math.max(...all.map((p) => p[1])), opts.integer);
  const x = (t) => left + (t - t0) / (t1 - t0) * (width - left - right);
  const y = (v) => top + (1 - v / axis.max) * (height - top - bottom);
  for (let v = 0; v <= axis.max + 1e-9; v += axis.step) {
    chart.append(svg("line", {x1: left, x2: width - right, y1: y(v), y2: y(v), class: "grid-line"}));
    chart.append(svg("text", {x: left - 6, y: y(v) + 4, "text-anchor": "end", class: "axis"},
      `${Number.isInteger(v) ? v : Number(v.toFixed(2))}${opts.unit || ""}`));
  }
  const seconds = t1 - t0 < 600;
  for (const [t, anchor] of [[t0, "start"], [(t0 + t1) / 2, "middle"], [t1, "end"]]) {
    chart.append(svg("text", {x: x(t), y: height - 8, "text-anchor": anchor, class: "axis"}, clock(t, seconds)));
  }
  for (const s of series) {
    if (!s.points.length) continue;
    let d = "";
    s.points.forEach(([t, v], i) => {
      // A step line: a value holds until the next sample (and the last one until the chart's end).
      d += i === 0 ? `M${x(t)},${y(v)}` : (opts.step ? `H${x(t)}V${y(v)}` : `L${x(t)},${y(v)}`);
    });
    if (opts.step) d += `H${x(t1)}`;
    chart.append(svg("path", {d, fill: "none", stroke: s.colour, "stroke-width": 2, class: "series"},
      svg("title", {}, s.name)));
  }
  return chart;
}

// Paired horizontal bars per row: [{label, values: [{name, value, colour}]}], values in [0, max].
function pairedBars(rows, opts = {}) {
  const width = opts.width || 640, bar = 10, label = 140;
  const max = opts.max || Math.max(1e-9, ...rows.flatMap((r) => r.values.map((v) => v.value)));
  const rowHeight = rows[0] ? rows[0].values.length * (bar + 2) + 10 : 0;
  const height = rows.length * rowHeight + 4;
  const chart = svg("svg", {class: "bars", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": opts.label || "bars"});
  rows.forEach((row, i) => {
    const top = i * rowHeight + 2;
    chart.append(svg("text", {x: 0, y: top + rowHeight / 2, class: "label"}, row.label));
    row.values.forEach((v, j) => {
      const w = Math.max(1, v.value / max * (width - label - 70));
      const yTop = top + j * (bar + 2);
      chart.append(svg("rect", {x: label, y: yTop, width: w, height: bar, fill: v.colour, rx: 2},
        svg("title", {}, `${row.label}: ${v.name} ${(v.value * 100).toFixed(1)}%`)));
      chart.append(svg("text", {x: label + w + 4, y: yTop + bar - 1, class: "axis"}, `${(v.value * 100).toFixed(1)}%`));
    });
  });
  return chart;
}

function legend(items) {
  return Corral.h("div", {class: "legend"}, items.map(([name, colour]) => {
    const swatch = Corral.h("i", {});
    swatch.style.background = colour;  // CSSOM, not a style attribute: the page's CSP allows no inline styles
    return Corral.h("span", {}, swatch, name);
  }));
}

Object.assign(window, {CorralCharts: {heatmap, lineChart, pairedBars, legend, gpuColour, busyColour, COLOURS}});
