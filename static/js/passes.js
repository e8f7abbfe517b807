// Pass boundaries on a chart whose x axis is the request number, shared by the TTFT chart (chart.js) and the
// live chart (live.js): a dotted line before each pass but the first, and every pass labelled at its start.
// Loaded before both (templates/base.html); `passes` is a run's [{number, order, first_request}].
(() => {
  "use strict";

  function passMarks(passes) {
    const shapes = passes.slice(1).map((p) => ({
      type: "line", xref: "x", yref: "paper", x0: p.first_request - 0.5, x1: p.first_request - 0.5, y0: 0, y1: 1,
      line: { color: window.kvscope.palette.rule(), width: 1, dash: "dot" },
    }));
    const annotations = passes.map((p) => ({
      xref: "x", yref: "paper", x: p.first_request - 0.5, y: 1, xanchor: "left", yanchor: "bottom", showarrow: false,
      text: `pass ${p.number} · ${p.order}`, font: { size: 12, color: window.kvscope.palette.inkSoft() },
    }));
    return { shapes, annotations };
  }

  window.kvscope = { ...window.kvscope, passMarks };
})();
