// The Runs area: enables "Compare" when exactly two runs are picked, and draws a run's (or two runs') TTFT per
// request when its detail arrives: run a solid, run b dashed, one colour per configuration (the page's --run-N
// colours), so the two runs are told apart by line style as well as by name.
(() => {
  "use strict";

  const { palette, plot } = window.kvscope;

  function pickedChanged() {
    const form = document.getElementById("runs-compare");
    if (!form) return;
    const picked = form.querySelectorAll("input[name=pick]:checked").length;
    const button = form.querySelector("[data-role=compare]");
    if (button) button.disabled = picked !== 2;
  }

  function draw() {
    const div = document.getElementById("runs-compare-chart");
    if (!div || !window.Plotly || div.dataset.drawn) return;
    div.dataset.drawn = "true";
    const series = JSON.parse(div.dataset.series);
    const single = div.dataset.single === "true";
    const traces = [];
    for (const [which, dash] of single ? [["a", "solid"]] : [["a", "solid"], ["b", "dash"]]) {
      const id = div.dataset[which];
      for (const s of series[which]) {
        const c = palette.config(s.config);
        traces.push({
          type: "scatter", mode: "lines+markers", name: single ? s.config : `run ${id} · ${s.config}`,
          x: s.x, y: s.ttft_ms, line: { color: c, width: 1.5, dash },
          marker: { color: c, size: 6, symbol: which === "a" ? "circle" : "circle-open" },
          hovertemplate: `run ${id} · ${s.config} · request %{x}<br>%{y:.1f} ms<extra></extra>`,
        });
      }
    }
    const layout = plot.layout(div, {
      height: 320,
      xaxis: { title: { text: "request (of its configuration)" } },
      yaxis: { title: { text: "TTFT, ms" }, rangemode: "tozero" },
    });
    window.Plotly.newPlot(div, traces, layout, plot.config);
  }

  document.addEventListener("change", (evt) => { if (evt.target.matches?.("#runs-compare input[name=pick]")) pickedChanged(); });
  document.addEventListener("htmx:after:swap", () => { pickedChanged(); draw(); });
  document.addEventListener("DOMContentLoaded", draw);
})();
