// Shared Plotly pieces: the base layout every chart starts from (font, background, grid, legend placed where it
// cannot cover an axis title), the config, and extendTraces batched to one redraw per animation frame.
(() => {
  "use strict";

  const NARROW = 560; // px: below this a legend beside the plot would take half of it
  const FONT = { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 13, color: "#222" };
  const config = { displayModeBar: false, responsive: true };

  /** A layout for the chart in `el`: the base, then `own`. The legend goes above the plot (never beside it on a
   *  phone, never under the x-axis title), and the margins shrink on narrow screens. */
  function layout(el, own = {}) {
    const narrow = (el?.clientWidth || window.innerWidth) < NARROW;
    const base = {
      font: narrow ? { ...FONT, size: 11 } : FONT,
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fff",
      margin: narrow ? { l: 52, r: 8, t: 30, b: 44 } : { l: 64, r: 16, t: 30, b: 48 },
      legend: { orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom", font: { size: narrow ? 11 : 12 },
        ...(narrow ? { entrywidth: 0.5, entrywidthmode: "fraction" } : {}) }, // two entries a row on a phone
    };
    const out = { ...base, ...own };
    for (const axis of ["xaxis", "yaxis"]) out[axis] = { gridcolor: "#eee", zeroline: false, automargin: true, ...own[axis] };
    if (own.margin) out.margin = { ...base.margin, ...own.margin };
    return out;
  }

  // One extendTraces per chart per animation frame: points that arrive in the same frame are drawn together.
  const queued = new Map(); // div -> Map(traceIndex -> {key: [values]})
  let frame = 0;

  function flush() {
    frame = 0;
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

  /** Draw what is queued now (before a reset replaces the chart, or when a test reads the chart's data). */
  function drain() { if (frame) { cancelAnimationFrame(frame); flush(); } }

  window.kvscope = { ...window.kvscope, plot: { layout, config, extend, drain } };
})();
