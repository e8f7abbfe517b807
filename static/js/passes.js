// Pass boundaries on a chart whose x axis is the request number, shared by the TTFT chart (chart.js) and the
// live chart (live.js): a dotted line before each pass but the first, and every pass labelled at its start, inside the plot.
// Loaded before both (templates/base.html); `passes` is a run's [{number, order, first_request}].
(() => {
  "use strict";

  // The labels sit inside the plot's top edge, where the legend above the plot (plot.layout) cannot cover them; on a
  // chart narrower than this a label is its pass number alone ("pass 1 · forward" is wider than ten requests there).
  const NARROW = 560;

  function passMarks(passes, div) {
    const { palette } = window.kvscope;
    const shapes = passes.slice(1).map((p) => ({
      type: "line", xref: "x", yref: "paper", x0: p.first_request - 0.5, x1: p.first_request - 0.5, y0: 0, y1: 1,
      line: { color: palette.rule(), width: 1, dash: "dot" },
    }));
    const narrow = (div?.clientWidth || window.innerWidth) < NARROW;
    const annotations = passes.map((p) => ({
      xref: "x", yref: "paper", x: p.first_request - 0.5, y: 1, xanchor: "left", yanchor: "top", showarrow: false,
      text: narrow ? `pass ${p.number}` : `pass ${p.number} · ${p.order}`, font: { size: 11, color: palette.inkSoft() },
    }));
    return { shapes, annotations };
  }

  window.kvscope = { ...window.kvscope, passMarks };
})();
