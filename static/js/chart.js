// The TTFT chart: one line per configuration, a point per request added as its `ttft` event is applied,
// batched to one redraw per animation frame (plot.extend). Marker shape: where most of the prompt came from.
// Axes are fixed from the run's known size and slowest request, so points never make the chart jump.
(() => {
  "use strict";

  const { palette, plot } = window.kvscope;

  let div = null;
  let traceOf = new Map(); // run -> trace index

  function reset() {
    div = document.getElementById("ttft-chart");
    if (!div || !window.Plotly) return;
    const runs = JSON.parse(div.dataset.runs);
    const requests = Number(div.dataset.requests);
    // Empty under load: queueing is not known before the run, so the axis follows the points.
    const top = div.dataset.ttftMaxMs ? Number(div.dataset.ttftMaxMs) * 1.12 : null;
    const passes = JSON.parse(div.dataset.passes);
    traceOf = new Map(runs.map((run, i) => [run, i]));
    plot.drain();
    const traces = runs.map((run, i) => ({
      type: "scatter", mode: "lines+markers", name: run, meta: "run", showlegend: true,
      x: [], y: [], customdata: [],
      line: { color: palette.run(i), width: 1.5 },
      marker: { color: palette.run(i), size: 9, symbol: [], line: { color: palette.plotBackground(), width: 1 } },
      hovertemplate: `<b>${run}</b> · request %{x}<br>%{y:.1f} ms · %{customdata}<extra></extra>`,
    }));
    // Legend entries for the marker shapes (no data), for the sources this run can have: a GPU hit and computed
    // always, a load from each tier behind the GPU that a configuration has ("gpu+cpu+disk" has the CPU and the disk).
    const tiers = new Set(runs.flatMap((run) => run.split("+")));
    const known = palette.sources.filter((s) => s === "computed" || tiers.has(s));
    const further = [...tiers].filter((t) => !palette.sources.includes(t)); // named by its tier (palette.source)
    for (const { symbol, label } of [...known, ...further].map(palette.source)) {
      traces.push({
        type: "scatter", mode: "markers", name: label, meta: "legend", x: [null], y: [null],
        marker: { symbol, color: palette.key(), size: 9 }, hoverinfo: "skip",
      });
    }
    const marks = window.kvscope.passMarks(passes, div); // labels inside the plot's top edge, the legend above it
    const layout = plot.layout(div, {
      height: 360, margin: { t: 64 },
      xaxis: { title: { text: "request" }, range: [-0.5, requests - 0.5] },  // seq 0 .. requests - 1
      yaxis: { title: { text: "TTFT, ms" }, ...(top ? { range: [0, top] } : { rangemode: "tozero" }) },
      ...marks,
    }, traces.map((t) => t.name));
    window.Plotly.newPlot(div, traces, layout, plot.config);
  }

  function ttft(ev) {
    const i = traceOf.get(ev.run);
    if (i === undefined || !div) return;
    const source = palette.source(ev.source);
    plot.extend(div, i, {
      x: ev.seq, y: ev.ttft_ms, "marker.symbol": source.symbol, customdata: `doc ${ev.doc} · ${source.tooltip}`,
    });
  }

  document.addEventListener("kvscope:reset", reset);
  document.addEventListener("kvscope:event", (e) => { if (e.detail.event.type === "ttft") ttft(e.detail.event); });
})();
