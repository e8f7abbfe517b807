// Shared Plotly pieces: the base layout every chart starts from (font, background, grid, legend placed where it
// cannot cover an axis title), the config, and every update that follows a stream (points added, a chart redrawn)
// batched to at most one redraw per chart per animation frame.
(() => {
  "use strict";

  const NARROW = 560; // px: below this a legend beside the plot would take half of it
  const { palette } = window.kvscope;
  const FAMILY = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif";
  const config = { displayModeBar: false, responsive: true };

  /** A layout for the chart in `el`: the base, then `own`. The legend goes above the plot (never beside it on a
   *  phone, never under the x-axis title), and the margins shrink on narrow screens. */
  function layout(el, own = {}) {
    const narrow = (el?.clientWidth || window.innerWidth) < NARROW;
    const base = {
      font: { family: FAMILY, size: narrow ? 11 : 13, color: palette.ink() },
      paper_bgcolor: "transparent", plot_bgcolor: palette.plotBackground(),
      margin: narrow ? { l: 52, r: 8, t: 30, b: 44 } : { l: 64, r: 16, t: 30, b: 48 },
      // Entries wrap onto more rows as the width asks; a legend above the plot pushes the top margin (Plotly's automargin).
      legend: { orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom", font: { size: narrow ? 11 : 12 } },
    };
    const out = { ...base, ...own };
    // A title keeps to the top edge, so the legend's extra rows go between it and the plot, never over it.
    if (own.title) out.title = { y: 1, yref: "container", yanchor: "top", pad: { t: 8 }, ...own.title };
    for (const axis of ["xaxis", "yaxis"]) out[axis] = { gridcolor: palette.grid(), zeroline: false, automargin: true, ...own[axis] };
    if (own.margin) out.margin = { ...base.margin, ...own.margin };
    return out;
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

  // One extendTraces per chart per animation frame: points that arrive in the same frame are drawn together.
  const queued = new Map(); // div -> Map(traceIndex -> {key: [values]})
  const redraws = new Map(); // div -> the latest draw asked for it this frame (it replaces the chart's data)
  let frame = 0;

  function flush() {
    frame = 0;
    for (const [div, draw] of redraws) if (div.isConnected && window.Plotly) draw();
    redraws.clear();
    for (const [div, byTrace] of queued) {
      const indices = [...byTrace.keys()];
      const keys = [...new Set(indices.flatMap((i) => Object.keys(byTrace.get(i))))];
      const update = Object.fromEntries(keys.map((k) => [k, indices.map((i) => byTrace.get(i)[k] ?? [])]));
      if (div.isConnected && window.Plotly) window.Plotly.extendTraces(div, update, indices);
    }
    queued.clear();
  }

  /** Add one point's values ({x: v, y: v, ...}) to trace `index` of `div`, drawn on the next animation frame. */
  function extend(div, index, point) {
    if (!queued.has(div)) queued.set(div, new Map());
    const byTrace = queued.get(div);
    if (!byTrace.has(index)) byTrace.set(index, {});
    const values = byTrace.get(index);
    for (const [k, v] of Object.entries(point)) (values[k] ??= []).push(v);
    if (!frame) frame = requestAnimationFrame(flush);
  }

  /** Redraw `div` with `draw()` on the next animation frame; a later call in the same frame replaces an earlier
   *  one, so a burst of events costs one redraw. Points queued for `div` before it are dropped with its old data. */
  function redraw(div, draw) {
    queued.delete(div);
    redraws.set(div, draw);
    if (!frame) frame = requestAnimationFrame(flush);
  }

  /** Draw what is queued now (before a reset replaces the chart, or when a test reads the chart's data). */
  function drain() { if (frame) { cancelAnimationFrame(frame); flush(); } }

  window.kvscope = { ...window.kvscope, plot: { layout, config, draw, extend, redraw, drain } };
})();
