// Measured against predicted (templates/analysis/versus.html): every request's TTFT, measured as markers and
// predicted as a dashed line, one colour per configuration (the palette's), drawn once HTMX has swapped it in.
(() => {
  "use strict";

  function draw(el) {
    const { palette, plot } = window.kvscope;
    const data = JSON.parse(el.dataset.versus);
    const traces = [];
    for (const s of data.series) {
      const colour = palette.run(s.index);
      const hover = "pass %{customdata[0]} %{customdata[1]} · doc %{customdata[2]} · request %{x}<br>%{y:,.1f} ms";
      if (s.measured.length) {
        traces.push({
          type: "scatter", mode: "markers", name: `${s.run} measured`, meta: `${s.run}:measured`, x: s.x, y: s.measured,
          customdata: s.info, marker: { color: colour, size: 7, symbol: "circle" },
          hovertemplate: `<b>${s.run} measured</b> · ${hover}<extra></extra>`,
        });
      }
      traces.push({
        type: "scatter", mode: "lines", name: `${s.run} predicted`, meta: `${s.run}:predicted`, x: s.x, y: s.predicted,
        customdata: s.info, line: { color: colour, dash: "dash", width: 2, shape: "hv" },
        hovertemplate: `<b>${s.run} predicted</b> · ${hover}<extra></extra>`,
      });
    }
    const layout = plot.layout(el, {
      height: 340,
      xaxis: { title: { text: "request" } },
      yaxis: { title: { text: "time to first token, ms" }, rangemode: "tozero" },
    });
    window.Plotly.newPlot(el, traces, layout, plot.config);
  }

  function drawAll() {
    if (!window.Plotly || !window.kvscope?.plot) return;
    for (const el of document.querySelectorAll("[data-versus]:not([data-drawn])")) {
      el.dataset.drawn = "true";
      draw(el);
    }
  }

  document.addEventListener("htmx:after:swap", drawAll);
  document.addEventListener("DOMContentLoaded", drawAll);
})();
