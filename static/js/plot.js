// Shared Plotly pieces: the base layout every chart starts from (font, background, grid, legend placed where it
// cannot cover an axis title), the config, and every update that follows a stream (points added, a chart redrawn)
// batched to at most one redraw per chart per animation frame.
(() => {
  "use strict";

  const NARROW = 560; // px: below this a legend beside the plot would take half of it
  const { palette } = window.kvscope;
  const FAMILY = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif";
  const config = { displayModeBar: false, responsive: true };

  const measure = document.createElement("canvas").getContext("2d");
  const SYMBOL_PX = 40; // a legend entry's symbol and the gaps around its text

  /** Whether every legend entry (`names`) fits half the plot's width in `el` at `size` px. On a phone Plotly gives
   *  each entry the width of the longest, one entry per row when two do not fit: six rows on the TTFT chart. */
  function fitsTwoColumns(el, names, size) {
    if (!names?.length) return false;
    measure.font = `${size}px ${FAMILY}`;
    const half = ((el?.clientWidth || window.innerWidth) - 60) / 2; // less the narrow margins
    return names.every((name) => measure.measureText(name).width + SYMBOL_PX <= half);
  }

  /** A layout for the chart in `el`: the base, then `own`. The legend goes above the plot (never beside it on a
   *  phone, never under the x-axis title), in two columns on a phone when its entries (`names`) fit them, and the
   *  margins shrink on narrow screens. */
  function layout(el, own = {}, names = null) {
    const narrow = (el?.clientWidth || window.innerWidth) < NARROW;
    const base = {
      font: { family: FAMILY, size: narrow ? 11 : 13, color: palette.ink() },
      paper_bgcolor: "transparent", plot_bgcolor: palette.plotBackground(),
      margin: narrow ? { l: 52, r: 8, t: 30, b: 44 } : { l: 64, r: 16, t: 30, b: 48 },
      // Entries wrap onto more rows as the width asks; a legend above the plot pushes the top margin (Plotly's automargin).
      legend: { orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom", font: { size: narrow ? 11 : 12 },
        ...(narrow && fitsTwoColumns(el, names, 11) ? { entrywidth: 0.5, entrywidthmode: "fraction" } : {}) },
    };
    const out = { ...base, ...own };
    // A title keeps to the top edge, so the legend's extra rows go between it and the plot, never over it.
    if (own.title) out.title = { y: 1, yref: "container", yanchor: "top", pad: { t: 8 }, ...own.title };
    for (const axis of ["xaxis", "yaxis"]) out[axis] = { gridcolor: palette.grid(), zeroline: false, automargin: true, ...own[axis] };
    if (own.margin) out.margin = { ...base.margin, ...own.margin };
    return out;
  }

  /** An x range from 0 to the largest of `values`, padded a little each side: the 0 tick is labelled (the smallest
   *  value has a tick at or left of it) and stands clear of the y axis's own 0 in the corner. */
  function fromZero(values) {
    const top = Math.max(0, ...values.filter(Number.isFinite));
    return top > 0 ? [-0.03 * top, 1.04 * top] : undefined;
  }

  /** Plotly.newPlot, then room for a legend that wrapped onto more rows than the top margin holds (on a phone):
   *  the top margin grows until the legend clears the title. */
  function draw(div, traces, own) {
    window.Plotly.newPlot(div, traces, own, config);
    for (let tries = 0; tries < 4; tries++) { // the legend's own automargin moves it too: measure again
      const title = div.querySelector(".gtitle")?.getBoundingClientRect();
      const legend = div.querySelector(".legend")?.getBoundingClientRect();
      if (!title || !legend || legend.top >= title.bottom + 2) return;
      window.Plotly.relayout(div, { "margin.t": div._fullLayout.margin.t + Math.ceil(title.bottom - legend.top) + 6 });
    }
  }

  // One extendTraces per chart per animation frame: points that arrive in the same frame are drawn together. A chart's
  // redraw costs tens of ms whatever it adds (Plotly lays the whole chart out again), so a frame draws the charts
  // waiting longest until FRAME_BUDGET_MS has gone, and leaves the rest to the next frames: two charts' redraws never
  // make one long task together (bench/web.py's longest task).
  const FRAME_BUDGET_MS = 8;
  const pending = new Map(); // div -> {draw: the latest full draw asked for it (replaces its data) or null, points: Map(traceIndex -> {key: [values]})}
  let waiters = []; // settled()'s promises, resolved once nothing is pending
  let frame = 0;

  function job(div) {
    if (!pending.has(div)) pending.set(div, { draw: null, points: new Map() });
    return pending.get(div);
  }

  // Returns the points left for the next frame: after a full draw, a chart's points wait a frame rather than make
  // a second Plotly call in this one (unless everything is drawn now, as drain asks).
  function drawJob(div, { draw, points }, now) {
    if (!div.isConnected || !window.Plotly) return null;
    if (draw) {
      draw();
      if (points.size && !now) return { draw: null, points };
    }
    if (!points.size) return null;
    const indices = [...points.keys()];
    const keys = [...new Set(indices.flatMap((i) => Object.keys(points.get(i))))];
    const update = Object.fromEntries(keys.map((k) => [k, indices.map((i) => points.get(i)[k] ?? [])]));
    window.Plotly.extendTraces(div, update, indices);
    return null;
  }

  function flush(all = false) {
    frame = 0;
    const started = performance.now();
    const later = []; // set after the loop: a Map visits entries added while it is iterated
    for (const [div, work] of pending) { // the longest waiting first (a chart drawn goes to the back when it asks again)
      if (!all && performance.now() - started > FRAME_BUDGET_MS) break;
      pending.delete(div);
      const left = drawJob(div, work, all);
      if (left) later.push([div, left]);
    }
    for (const [div, left] of later) if (!pending.has(div)) pending.set(div, left);
    if (pending.size) {
      frame = requestAnimationFrame(() => flush());
    } else {
      const done = waiters;
      waiters = [];
      for (const resolve of done) resolve();
    }
  }

  function schedule() { if (!frame) frame = requestAnimationFrame(() => flush()); }

  /** Add one point's values ({x: v, y: v, ...}) to trace `index` of `div`, drawn on the next animation frame. */
  function extend(div, index, point) {
    const { points } = job(div);
    if (!points.has(index)) points.set(index, {});
    const values = points.get(index);
    for (const [k, v] of Object.entries(point)) (values[k] ??= []).push(v);
    schedule();
  }

  /** Redraw `div` with `draw()` on the next animation frame; a later call in the same frame replaces an earlier
   *  one, so a burst of events costs one redraw. Points queued for `div` before it are dropped with its old data. */
  function redraw(div, draw) {
    const work = job(div);
    work.draw = draw;
    work.points.clear();
    schedule();
  }

  /** Draw everything queued now (before a reset replaces the charts). */
  function drain() {
    if (frame) cancelAnimationFrame(frame);
    if (pending.size) flush(true);
    frame = 0;
  }

  /** Whether a chart still has updates waiting for a frame. */
  function busy() { return pending.size > 0; }

  /** Resolves once every queued update is drawn. */
  function settled() { return pending.size ? new Promise((resolve) => waiters.push(resolve)) : Promise.resolve(); }

  window.kvscope = { ...window.kvscope, plot: { layout, config, draw, fromZero, extend, redraw, drain, busy, settled } };
})();
