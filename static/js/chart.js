// The TTFT chart: one line per configuration, a point per request added with Plotly.extendTraces as its
// `ttft` event is applied (never redrawn per event). Marker shape: where most of the prompt came from.
// Axes are fixed from the run's known size and slowest request, so points never make the chart jump.
(() => {
  "use strict";

  const RUN_COLOURS = ["#D55E00", "#0072B2", "#009E73"]; // Okabe-Ito vermillion, blue, green
  const SOURCES = [
    ["gpu", "diamond", "GPU hit"],
    ["cpu", "square", "loaded from CPU"],
    ["disk", "triangle-up", "loaded from disk"],
    ["computed", "circle", "computed"],
  ];
  const SYMBOL = Object.fromEntries(SOURCES.map(([source, symbol]) => [source, symbol]));
  const SOURCE_LABEL = Object.fromEntries(SOURCES.map(([source, , label]) => [source, label]));

  let div = null;
  let traceOf = new Map(); // run -> trace index

  function reset() {
    div = document.getElementById("ttft-chart");
    if (!div || !window.Plotly) return;
    const runs = JSON.parse(div.dataset.runs);
    const requests = Number(div.dataset.requests);
    const top = Number(div.dataset.ttftMaxMs) * 1.12;
    const passes = JSON.parse(div.dataset.passes);
    traceOf = new Map(runs.map((run, i) => [run, i]));
    const traces = runs.map((run, i) => ({
      type: "scatter", mode: "lines+markers", name: run, meta: "run", showlegend: true,
      x: [], y: [], customdata: [],
      line: { color: RUN_COLOURS[i % RUN_COLOURS.length], width: 1.5 },
      marker: { color: RUN_COLOURS[i % RUN_COLOURS.length], size: 9, symbol: [], line: { color: "#fff", width: 1 } },
      hovertemplate: `<b>${run}</b> · request %{x}<br>%{y:.1f} ms · %{customdata}<extra></extra>`,
    }));
    // Legend entries for the marker shapes (no data).
    for (const [, symbol, label] of SOURCES) {
      traces.push({
        type: "scatter", mode: "markers", name: label, meta: "legend", x: [null], y: [null],
        marker: { symbol, color: "#6b6b6b", size: 9 }, hoverinfo: "skip",
      });
    }
    const layout = {
      margin: { l: 60, r: 10, t: 30, b: 44 },
      height: 340,
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fff",
      font: { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 13, color: "#222" },
      xaxis: { title: { text: "request" }, range: [0.5, requests + 0.5], zeroline: false, gridcolor: "#eee" },
      yaxis: { title: { text: "TTFT, ms" }, range: [0, top], zeroline: false, gridcolor: "#eee" },
      legend: { x: 1.02, y: 1, xanchor: "left", yanchor: "top", font: { size: 12 } },
      ...window.kvscope.passMarks(passes),
    };
    window.Plotly.newPlot(div, traces, layout, { displayModeBar: false, responsive: true });
  }

  function ttft(ev) {
    const i = traceOf.get(ev.run);
    if (i === undefined || !div) return;
    window.Plotly.extendTraces(div, {
      x: [[ev.seq + 1]], y: [[ev.ttft_ms]],
      // A source not listed is a further tier behind the CPU: drawn as the disk is.
      "marker.symbol": [[SYMBOL[ev.source] ?? SYMBOL.disk]],
      customdata: [[`doc ${ev.doc} · ${SOURCE_LABEL[ev.source] ?? `loaded from ${ev.source}`}`]],
    }, [i]);
  }

  document.addEventListener("kvscope:reset", reset);
  document.addEventListener("kvscope:event", (e) => { if (e.detail.event.type === "ttft") ttft(e.detail.event); });
})();
