// Analysis and planning panel: draws the charts its partials carry (data-chart) once HTMX has swapped them in.
// "requests": every request's TTFT of a measurement file, one series per configuration. "capacity": hit tokens or
// mean TTFT per pass against a tier's capacity, with the marked capacities (current, thresholds) as vertical lines.
(() => {
  "use strict";

  // Okabe-Ito colours, with a marker shape and a dash per series so that none is told apart by colour alone.
  const COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"];
  const SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down"];
  const DASHES = { block: "solid", doc: "dash" };
  const MARK_COLORS = ["#222222", "#D55E00", "#0072B2", "#009E73"];
  const MARK_DASHES = ["solid", "dash", "dot", "dashdot"];
  const FONT = { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 13, color: "#222" };
  const BASE = {
    font: FONT, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fff", margin: { l: 64, r: 16, t: 40, b: 90 },
    legend: { orientation: "h", x: 0, y: -0.28, yanchor: "top" },
  };
  const CONFIG = { displayModeBar: false, responsive: true };

  function requestsChart(el) {
    const data = JSON.parse(el.dataset.series);
    const traces = data.series.map((s, i) => ({
      type: "scatter", mode: "markers", name: s.config, meta: s.config, x: s.x, y: s.ttft_ms, customdata: s.info,
      marker: { color: COLORS[i % COLORS.length], symbol: SYMBOLS[i % SYMBOLS.length], size: 7, opacity: 0.85 },
      hovertemplate: `<b>${s.config}</b> · pass %{customdata[0]} %{customdata[1]} · doc %{customdata[2]} · seq %{customdata[3]}`
        + "<br>%{y:.1f} ms<extra></extra>",
    }));
    const layout = {
      ...BASE, height: 340, title: { text: "Time to first token, per request", font: { size: 14 } },
      xaxis: { title: { text: "request (file order)" }, gridcolor: "#eee", zeroline: false },
      yaxis: { title: { text: "TTFT, ms" }, gridcolor: "#eee", rangemode: "tozero" },
    };
    window.Plotly.newPlot(el, traces, layout, CONFIG);
  }

  function capacityChart(el) {
    const curve = JSON.parse(el.dataset.curve);
    const measure = el.dataset.measure;
    const hits = measure === "hits";
    const passes = [...new Set(curve.lines.map((l) => l.pass))];
    const traces = curve.lines.map((l) => {
      const i = passes.indexOf(l.pass);
      const name = `pass ${l.pass} ${l.order}${curve.tier === "gpu" ? ` (${l.granularity === "doc" ? "whole documents" : "blocks"})` : ""}`;
      return {
        type: "scatter", mode: "lines+markers", name, meta: `${l.granularity}:${l.pass}`, x: l.x, y: l[measure],
        line: { color: COLORS[i % COLORS.length], dash: DASHES[l.granularity] ?? "solid", width: 2, shape: "hv" },
        marker: { color: COLORS[i % COLORS.length], symbol: SYMBOLS[i % SYMBOLS.length], size: 5 },
        hovertemplate: `<b>${name}</b><br>%{x:,}: %{y:,.1f}${hits ? " tokens" : " ms"}<extra></extra>`,
      };
    });
    // The marks as vertical lines, each with its own dash, labelled at the top.
    const shapes = curve.marks.map((m, i) => ({
      type: "line", xref: "x", yref: "paper", x0: m.x, x1: m.x, y0: 0, y1: 1, name: m.key,
      line: { color: MARK_COLORS[i % MARK_COLORS.length], dash: MARK_DASHES[i % MARK_DASHES.length], width: 1.5 },
    }));
    const annotations = curve.marks.map((m, i) => ({
      x: m.x, xref: "x", y: 1 - 0.09 * i, yref: "paper", text: m.key.replace("_", " "), showarrow: false,
      xanchor: "left", font: { size: 11, color: MARK_COLORS[i % MARK_COLORS.length] }, bgcolor: "rgba(255,255,255,0.8)",
    }));
    const layout = {
      ...BASE, height: 360, shapes, annotations,
      title: { text: hits ? `${curve.tier === "gpu" ? "GPU" : "CPU"} hit tokens per pass` : "Predicted mean TTFT per pass", font: { size: 14 } },
      xaxis: { title: { text: curve.x_title }, gridcolor: "#eee", zeroline: false },
      yaxis: { title: { text: hits ? "hit tokens" : "mean TTFT, ms" }, gridcolor: "#eee", rangemode: "tozero" },
    };
    window.Plotly.newPlot(el, traces, layout, CONFIG);
  }

  // The advisor's Pareto front (no candidate is both cheaper and faster at p90) and the ranked configurations.
  function paretoChart(el) {
    const data = JSON.parse(el.dataset.pareto);
    const costOf = (r) => (data.priced ? r.dollars_per_hour : r.config.gpu_gib + r.config.cpu_gib_total + r.config.disk_gib_total);
    const label = (c) => `GPU ${c.gpu_tokens.toLocaleString()} tokens${c.cpu_tokens ? `, CPU ${c.cpu_gib_total.toFixed(2)} GiB` : ""}`;
    const traces = [
      {
        type: "scatter", mode: "lines+markers", name: "Pareto front", x: data.front.map((p) => p.cost), y: data.front.map((p) => p.p90_ms),
        text: data.front.map((p) => label(p.config)), line: { color: COLORS[0], shape: "hv", width: 2 },
        marker: { color: COLORS[0], symbol: SYMBOLS[0], size: 7 }, hovertemplate: "%{text}<br>%{x:.4f}: p90 %{y:,.1f} ms<extra></extra>",
      },
      {
        type: "scatter", mode: "markers", name: "meets the target", x: data.meets.map(costOf), y: data.meets.map((r) => r.p90_ms),
        text: data.meets.map((r) => label(r.config)), marker: { color: COLORS[1], symbol: SYMBOLS[1], size: 9 },
        hovertemplate: "%{text}<br>%{x:.4f}: p90 %{y:,.1f} ms<extra></extra>",
      },
    ];
    const layout = {
      ...BASE, height: 340, title: { text: "Cost against predicted p90 TTFT", font: { size: 14 } },
      xaxis: { title: { text: data.priced ? "$ per hour" : "memory, GiB" }, gridcolor: "#eee", zeroline: false },
      yaxis: { title: { text: "p90 TTFT, ms" }, gridcolor: "#eee", rangemode: "tozero" },
    };
    window.Plotly.newPlot(el, traces, layout, CONFIG);
  }

  const DRAW = { requests: requestsChart, capacity: capacityChart, pareto: paretoChart };

  function drawAll() {
    if (!window.Plotly) return;
    for (const el of document.querySelectorAll("#analysis [data-chart]:not([data-drawn])")) {
      el.dataset.drawn = "true";
      DRAW[el.dataset.chart]?.(el);
    }
  }

  document.addEventListener("htmx:after:swap", drawAll);
  document.addEventListener("DOMContentLoaded", drawAll);
})();
