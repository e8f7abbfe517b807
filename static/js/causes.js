// Computed tokens by cause as stacked bars (kvscope.causes.stack), and the main page's chart of them: one bar per pass
// and configuration, from each `pass` event's summary (sim.explain: its `computed` map and `infinite_hit_tokens`).
// The causes, in precedence order, and their labels come from the server (sim/explain/causes.py, on each chart's
// data-causes); their colours from the palette. The watch panel draws its twin's totals with the same function.
// A pass redraws the chart on the next animation frame (plot.redraw), however many passes arrive in it.
(() => {
  "use strict";

  const { palette, plot } = window.kvscope;

  /** [name, colour, label] of each cause, in precedence order, as `div`'s data-causes lists them. */
  function causesOf(div) {
    return JSON.parse(div?.dataset.causes ?? "[]").map((c) => [c.name, palette.cause(c.name), c.label]);
  }

  /** A cause with its amount in words, by its label (never its code key): "5,008 evicted", "160 past the last full
   *  chunk"; a label that names a thing ("the last token") takes "for": "16 for the last token". `div` carries
   *  data-causes. */
  function words(div, cause, amount) {
    const label = causesOf(div).find(([name]) => name === cause)?.[2] ?? cause;
    return `${amount} ${label.startsWith("the ") ? `for ${label}` : label}`;
  }

  /** One stacked bar per {label, computed, floor?}: its computed tokens by cause; a dotted box up to its floor (the
   *  tokens tiers of unbounded size would still compute), where it has one. */
  function stack(div, bars, height = 300) {
    if (!div || !window.Plotly) return;
    const x = bars.map((b) => b.label);
    const traces = causesOf(div).filter(([cause]) => bars.some((b) => b.computed[cause])).map(([cause, colour, label]) => ({
      type: "bar", name: label, x, y: bars.map((b) => b.computed[cause] ?? 0), marker: { color: colour, line: { color: palette.rule(), width: 0.5 } }, // a pale cause's edge on white
      hovertemplate: `${label}: %{y:,} tokens<extra>%{x}</extra>`,
    }));
    const layout = plot.layout(div, {
      barmode: "stack", height, margin: { t: 60, b: 60 }, bargap: bars.length < 3 ? 0.6 : 0.2, // one bar is not the chart's width
      yaxis: { title: { text: "computed tokens" }, rangemode: "tozero" },
      // Each bar's name on two level lines ("pass 2" over "gpu+cpu"): six names side by side fit a phone's width,
      // where rotated ones overlapped each other and ran past the chart's right edge.
      xaxis: { type: "category", tickangle: 0, tickvals: x, ticktext: x.map((l) => l.replace(" · ", "<br>")) },
      shapes: bars.filter((b) => b.floor !== undefined).map((b) => ({
        type: "rect", xref: "x", yref: "y", x0: bars.indexOf(b) - 0.45, x1: bars.indexOf(b) + 0.45, y0: 0, y1: b.floor,
        line: { color: palette.ink(), width: 1, dash: "dot" },
      })),
    }, traces.map((t) => t.name));
    window.Plotly.react(div, traces, layout, plot.config);
  }

  let div = null;
  let bars = []; // {label, computed, floor}

  function reset() {
    div = document.getElementById("causes-chart");
    bars = [];
    plot.drain();
    if (div && window.Plotly) window.Plotly.purge(div);
    stack(div, bars);
  }

  function pass(ev) {
    const s = ev.summary;
    if (!s.computed) return; // a run without attribution (--no-explain)
    bars.push({
      label: `pass ${s.pass} · ${ev.run}`,
      computed: s.computed,
      floor: s.computed_tokens - (s.infinite_hit_tokens - s.served_tokens),
    });
    if (div) plot.redraw(div, () => stack(div, bars));
  }

  document.addEventListener("kvscope:reset", reset);
  document.addEventListener("kvscope:event", (e) => { if (e.detail.event.type === "pass") pass(e.detail.event); });

  window.kvscope = { ...window.kvscope, causes: { stack, causesOf, words } };
})();
