// The scheduler strip (under load): requests running (solid) and waiting (dotted) after each step, one pair of step
// lines per configuration in its colour, a point per `step` event as the player applies it (plot.extend batches
// them to a redraw per frame). A run played one request at a time has no strip.
(() => {
  "use strict";

  const { palette, plot } = window.kvscope;
  let div = null;
  let traceOf = new Map(); // run -> index of its running trace (its waiting trace follows)

  function reset() {
    div = document.getElementById("steps-chart");
    if (!div || !window.Plotly) return;
    const runs = JSON.parse(div.dataset.runs);
    traceOf = new Map(runs.map((run, i) => [run, 2 * i]));
    const traces = runs.flatMap((run, i) => {
      const colour = palette.config(run);
      const common = { type: "scatter", mode: "lines", x: [], y: [], line: { color: colour, width: 2, shape: "hv" } };
      return [
        { ...common, name: `${run}: running`, hovertemplate: `<b>${run}</b> · step %{x}<br>%{y} running<extra></extra>` },
        { ...common, name: `${run}: waiting`, line: { ...common.line, dash: "dot" },
          hovertemplate: `<b>${run}</b> · step %{x}<br>%{y} waiting<extra></extra>` },
      ];
    });
    const layout = plot.layout(div, {
      height: 260,
      xaxis: { title: { text: "scheduler step" }, rangemode: "tozero" },
      yaxis: { title: { text: "requests" }, rangemode: "tozero", dtick: 1 },
    }, traces.map((t) => t.name));
    window.Plotly.newPlot(div, traces, layout, plot.config);
  }

  function step(ev) {
    const i = traceOf.get(ev.run);
    if (i === undefined || !div) return;
    plot.extend(div, i, { x: ev.step, y: ev.running_seqs.length });
    plot.extend(div, i + 1, { x: ev.step, y: ev.waiting_seqs.length });
  }

  document.addEventListener("kvscope:reset", reset);
  document.addEventListener("kvscope:event", (e) => { if (e.detail.event.type === "step") step(e.detail.event); });
})();
