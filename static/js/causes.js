// Computed tokens by cause, one stacked bar per pass and configuration, from each `pass` event's summary
// (sim.explain: its `computed` map and `infinite_hit_tokens`). The causes, in precedence order, and their
// labels come from the server (sim/explain/causes.py, on the chart's data-causes); their colours from the palette.
// A pass redraws the chart on the next animation frame (plot.redraw), however many passes arrive in it.
(() => {
  "use strict";

  const { palette, plot } = window.kvscope;
  let CAUSES = []; // [name, colour, label]
  let div = null;
  let bars = []; // {label, computed, floor}

  function draw() {
    if (!div || !window.Plotly) return;
    const x = bars.map((b) => b.label);
    const traces = CAUSES.filter(([cause]) => bars.some((b) => b.computed[cause])).map(([cause, colour, label]) => ({
      type: "bar", name: label, x, y: bars.map((b) => b.computed[cause] ?? 0), marker: { color: colour },
      hovertemplate: `${label}: %{y:,} tokens<extra>%{x}</extra>`,
    }));
    const layout = plot.layout(div, {
      barmode: "stack", height: 300, margin: { t: 60, b: 60 },
      yaxis: { title: { text: "computed tokens" }, rangemode: "tozero" },
      xaxis: { type: "category" },
      shapes: bars.map((b, i) => ({
        type: "rect", xref: "x", yref: "y", x0: i - 0.45, x1: i + 0.45, y0: 0, y1: b.floor,
        line: { color: palette.ink(), width: 1, dash: "dot" },
      })),
    });
    window.Plotly.react(div, traces, layout, plot.config);
  }

  function reset() {
    div = document.getElementById("causes-chart");
    bars = [];
    CAUSES = JSON.parse(div?.dataset.causes ?? "[]").map((c) => [c.name, palette.cause(c.name), c.label]);
    plot.drain();
    if (div && window.Plotly) window.Plotly.purge(div);
    draw();
  }

  function pass(ev) {
    const s = ev.summary;
    if (!s.computed) return; // a run without attribution (--no-explain)
    bars.push({
      label: `pass ${s.pass} · ${ev.run}`,
      computed: s.computed,
      floor: s.computed_tokens - (s.infinite_hit_tokens - s.served_tokens),
    });
    if (div) plot.redraw(div, draw);
  }

  document.addEventListener("kvscope:reset", reset);
  document.addEventListener("kvscope:event", (e) => { if (e.detail.event.type === "pass") pass(e.detail.event); });
})();
