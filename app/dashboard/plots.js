// Inline SVG plots drawn from the API's data (no chart library, nothing from the internet).
// Three shapes: a line chart (loss, eval accuracy over steps; an external bench's cost/quality
// curves, quality over the share of strong calls), the hill-climb chart (anchor score
// per candidate with best-so-far, branches, failures and rung moves), the bench chart (baseline
// vs router per family with 95% intervals). A plot needs two points: a series, a search or a bench
// with one value is said as a line of text instead ("eval accuracy · anchor_score 0.72 at step 40
// (one point)"), never drawn as a lone dot.
"use strict";

const TrmPlots = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const W = 640, H = 260, M = { left: 52, right: 16, top: 44, bottom: 40 };

  function node(name, attrs, parent, text) {
    const el = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    if (text !== undefined) el.textContent = text;
    if (parent) parent.appendChild(el);
    return el;
  }

  function linear([d0, d1], [r0, r1]) {
    const span = d1 - d0 || 1;
    return (v) => r0 + ((v - d0) / span) * (r1 - r0);
  }

  function ticks(lo, hi, count) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / count;
    const mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toFixed(10));
    return out;
  }

  function fmt(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "-";
    const a = Math.abs(v);
    return a !== 0 && (a < 0.01 || a >= 1e5) ? v.toExponential(1) : String(+v.toFixed(3));
  }

  // The frame every plot shares: an svg, axes with ticks, labels; returns the scales.
  function frame(title, xDomain, yDomain, xLabel, yLabel, opts = {}) {
    const svg = node("svg", { viewBox: `0 0 ${W} ${H}`, class: `plot ${opts.cls || ""}`, role: "img" });
    node("title", {}, svg, title);
    node("text", { x: M.left, y: 16, class: "plot-title" }, svg, title);
    const x = linear(xDomain, [M.left, W - M.right]);
    const y = linear(yDomain, [H - M.bottom, M.top]);
    const axis = node("g", { class: "axis" }, svg);
    for (const t of ticks(yDomain[0], yDomain[1], 4)) {
      node("line", { x1: M.left, x2: W - M.right, y1: y(t), y2: y(t), class: "grid" }, axis);
      node("text", { x: M.left - 6, y: y(t) + 4, "text-anchor": "end" }, axis, fmt(t));
    }
    const xt = opts.xTicks || ticks(xDomain[0], xDomain[1], 6).filter((t) => Number.isInteger(t));
    for (const t of xt) {
      node("line", { x1: x(t), x2: x(t), y1: H - M.bottom, y2: H - M.bottom + 4 }, axis);
      node("text", { x: x(t), y: H - M.bottom + 16, "text-anchor": "middle" }, axis, String(t));
    }
    node("line", { x1: M.left, x2: W - M.right, y1: H - M.bottom, y2: H - M.bottom }, axis);
    node("text", { x: (M.left + W - M.right) / 2, y: H - 6, "text-anchor": "middle", class: "label" }, axis, xLabel);
    node("text", { x: 8, y: M.top - 12, class: "label" }, axis, yLabel);
    return { svg, x, y };
  }

  // Text in place of a plot: one value is what a plot of a single point would have shown.
  function note(text, attrs) {
    const p = document.createElement("p");
    p.className = "plot-single muted";
    for (const [k, v] of Object.entries(attrs)) p.setAttribute(k, String(v));
    p.textContent = text;
    return p;
  }
  const onePoint = (text, attrs) => note(`${text} (one point)`, attrs);

  function group(nodes) {
    if (nodes.length === 1) return nodes[0];
    const box = document.createElement("div");
    box.className = "plot-set";
    box.append(...nodes);
    return box;
  }

  function legend(svg, items) {
    let at = W - M.right;
    for (const [label, cls] of [...items].reverse()) {
      at -= label.length * 6.5 + 22;
      const g = node("g", { class: `legend ${cls}` }, svg);
      node("rect", { x: at, y: 7, width: 10, height: 10, class: "swatch" }, g);
      node("text", { x: at + 14, y: 16 }, g, label);
    }
  }

  // series: [{name, points: [[x, y], ...]}]; the y domain starts at 0 unless told otherwise.
  // Series of two points or more are drawn; a series of one is a line of text below the plot.
  // `xTicks` for an x axis of fractions (the default ticks are whole steps); `cls` names the svg.
  function lineChart({ title, series, xLabel, yLabel, yDomain, xTicks, cls }) {
    const drawn = series.filter((s) => s.points.length >= 2);
    const single = series.filter((s) => s.points.length === 1).map((s) => {
      const [px, py] = s.points[0];
      return onePoint(`${title} · ${s.name} ${fmt(py)} at ${xLabel} ${px}`, { "data-plot": title, "data-series": s.name });
    });
    return group([...(drawn.length ? [linePlot({ title, series: drawn, xLabel, yLabel, yDomain, xTicks, cls })] : []), ...single]);
  }

  function linePlot({ title, series, xLabel, yLabel, yDomain, xTicks, cls }) {
    const all = series.flatMap((s) => s.points);
    const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
    const xDomain = [Math.min(...xs, 0), Math.max(...xs, 1)];
    const yd = yDomain || [Math.min(0, ...ys), Math.max(...ys, 1e-9) * 1.05];
    const { svg, x, y } = frame(title, xDomain, yd, xLabel, yLabel, { xTicks, cls });
    series.forEach((s, i) => {
      const cls = `series s${i}`;
      const g = node("g", { class: cls, "data-series": s.name, "data-points": s.points.length }, svg);
      const d = s.points.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join("");
      node("path", { d, class: "line" }, g);
      if (s.points.length <= 60) {
        for (const [px, py] of s.points) {
          const c = node("circle", { cx: x(px), cy: y(py), r: 2.5, class: "dot" }, g);
          node("title", {}, c, `${s.name} ${fmt(py)} at ${xLabel} ${px}`);
        }
      }
    });
    if (series.length > 1) legend(svg, series.map((s, i) => [s.name, `s${i}`]));
    return svg;
  }

  // candidates: [{n, id, score, decision, rung, reason}] in ledger order, one per finished
  // candidate. Failed ones have no score: drawn as a cross on the axis.
  function hillclimbChart(candidates) {
    const n = candidates.length;
    if (n < 2) {
      const c = candidates[0];
      return onePoint(`anchor score per candidate · ${c.id} ${fmt(c.score)} (${c.decision || "?"})`, { "data-plot": "hillclimb", "data-candidate": c.id });
    }
    const scores = candidates.map((c) => c.score).filter((s) => typeof s === "number");
    const top = Math.max(1, ...scores);
    const xTicks = n <= 20 ? candidates.map((c) => c.n) : null;
    const { svg, x, y } = frame("anchor score per candidate", [0.5, n + 0.5], [0, top], "candidate (in order)", "anchor", { cls: "hillclimb", xTicks });
    let prevRung = null;
    const marks = node("g", { class: "rungs" }, svg);
    for (const c of candidates) {
      if (prevRung !== null && c.rung !== prevRung) {
        const at = x(c.n - 0.5);
        node("line", { x1: at, x2: at, y1: M.top, y2: H - M.bottom, class: "rung-move", "data-rung": c.rung }, marks);
        const right = at > W - 90; // keep the label inside the plot
        node("text", { x: right ? at - 3 : at + 3, y: M.top + 10, "text-anchor": right ? "end" : "start", class: "rung-label" }, marks, `rung ${prevRung}→${c.rung}`);
      }
      prevRung = c.rung;
    }
    let best = null, path = "";
    for (const c of candidates) {
      if (c.decision === "best" && typeof c.score === "number") best = c.score;
      if (best !== null) {
        path += `${path ? "L" : "M"}${x(c.n - 0.5).toFixed(1)},${y(best).toFixed(1)}H${x(c.n + 0.5).toFixed(1)}`;
      }
    }
    node("path", { d: path, class: "best-so-far" }, svg);
    const pts = node("g", { class: "points" }, svg);
    for (const c of candidates) {
      const attrs = { class: `point ${c.decision || "unknown"}`, "data-candidate": c.id, "data-decision": c.decision || "" };
      let el;
      if (typeof c.score !== "number") {
        const cx = x(c.n), cy = y(0) - 6;
        el = node("path", { ...attrs, d: `M${cx - 5},${cy - 5}L${cx + 5},${cy + 5}M${cx - 5},${cy + 5}L${cx + 5},${cy - 5}` }, pts);
      } else if (c.decision === "branch") {
        const cx = x(c.n), cy = y(c.score);
        el = node("path", { ...attrs, d: `M${cx},${cy - 6}L${cx + 6},${cy}L${cx},${cy + 6}L${cx - 6},${cy}Z` }, pts);
      } else {
        el = node("circle", { ...attrs, cx: x(c.n), cy: y(c.score), r: c.decision === "best" ? 6 : 4.5 }, pts);
      }
      node("title", {}, el, `candidate ${c.id} (rung ${c.rung}): ${c.decision || "?"} anchor ${fmt(c.score)}${c.reason ? ` — ${c.reason}` : ""}`);
    }
    legend(svg, [["best", "best"], ["branch", "branch"], ["discard", "discard"], ["failed", "failed"], ["best so far", "best-so-far"]]);
    return svg;
  }

  // rows: [{family, baseline: {value, lo, hi}, router: {value, lo, hi}}]
  function benchChart(rows) {
    const values = rows.flatMap((r) => [["baseline", r.baseline], ["router", r.router]]
      .filter(([, s]) => s && typeof s.value === "number").map(([name, s]) => [r.family, name, s]));
    if (!values.length) return note("baseline vs router: no score in the scorecard", { "data-plot": "bench" });
    if (values.length < 2) {
      const [family, name, s] = values[0];
      return onePoint(`baseline vs router · ${family} ${name} ${fmt(s.value)}`, { "data-plot": "bench" });
    }
    const rowH = 34, h = M.top + rows.length * rowH + 34;
    const svg = node("svg", { viewBox: `0 0 ${W} ${h}`, class: "plot bench", role: "img" });
    node("title", {}, svg, "baseline vs router per family");
    node("text", { x: M.left, y: 16, class: "plot-title" }, svg, "baseline vs router per family (95% interval)");
    const left = 150, x = linear([0, 1], [left, W - M.right]);
    const axis = node("g", { class: "axis" }, svg);
    for (const t of [0, 0.25, 0.5, 0.75, 1]) {
      node("line", { x1: x(t), x2: x(t), y1: M.top, y2: h - 30, class: "grid" }, axis);
      node("text", { x: x(t), y: h - 16, "text-anchor": "middle" }, axis, String(t));
    }
    rows.forEach((r, i) => {
      const base = M.top + i * rowH;
      const g = node("g", { class: "family", "data-family": r.family }, svg);
      node("text", { x: left - 8, y: base + 20, "text-anchor": "end" }, g, r.family);
      [["baseline", r.baseline, 11], ["router", r.router, 23]].forEach(([name, s, dy]) => {
        if (!s || typeof s.value !== "number") return;
        const cy = base + dy;
        const sg = node("g", { class: `side ${name}` }, g);
        if (typeof s.lo === "number" && typeof s.hi === "number") {
          node("line", { x1: x(s.lo), x2: x(s.hi), y1: cy, y2: cy, class: "interval" }, sg);
        }
        const c = node("circle", { cx: x(s.value), cy, r: 4.5, class: "dot" }, sg);
        node("title", {}, c, `${r.family} ${name} ${fmt(s.value)} [${fmt(s.lo)}, ${fmt(s.hi)}]`);
      });
    });
    legend(svg, [["baseline", "baseline"], ["router", "router"]]);
    return svg;
  }

  return { lineChart, hillclimbChart, benchChart, fmt };
})();
