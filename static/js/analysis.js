// Analysis and planning panel: draws the charts its partials carry (data-chart) once HTMX has swapped them in.
// "requests": every request's TTFT of a measurement file, one series per configuration. "capacity": hit tokens or
// mean TTFT per pass against a tier's capacity, with the marked capacities (current, thresholds) as vertical lines.
// Colours from the page's palette: a configuration has its colour everywhere (palette.config); a series that is none
// (a pass, the advisor's front and candidates, a marked capacity) borrows no configuration's or source's hue: it is
// drawn in the series ink with a dash and a marker of its own (palette.series), and the legend names it.
(() => {
  "use strict";

  const { palette, plot, format } = window.kvscope;
  // The scenario's own capacity in ink, the thresholds as rules; each its own dash, its label in ink dark enough to read.
  const markColour = (i) => (i === 0 ? palette.ink() : palette.seriesRule());
  const markText = (i) => (i === 0 ? palette.ink() : palette.inkSoft());
  const TITLED = { margin: { t: 72 } }; // room for the title above the legend

  function requestsChart(el) {
    const data = JSON.parse(el.dataset.series);
    const traces = data.series.map((s, i) => ({
      type: "scatter", mode: "markers", name: s.config, meta: s.config, x: s.x, y: s.ttft_ms, customdata: s.info,
      marker: { color: palette.config(s.config), symbol: palette.series(i).symbol, size: 7, opacity: 0.85 },
      hovertemplate: `<b>${s.config}</b> · request %{x} · pass %{customdata[0]} %{customdata[1]} · doc %{customdata[2]}`
        + "<br>%{y:.1f} ms<extra></extra>",
    }));
    const layout = plot.layout(el, {
      ...TITLED, height: 360, title: { text: "Time to first token, per request", font: { size: 14 } },
      xaxis: { title: { text: "request (in file order, per configuration)" } },
      yaxis: { title: { text: "TTFT, ms" }, rangemode: "tozero" },
    });
    plot.draw(el, traces, layout);
  }

  function capacityChart(el) {
    const curve = JSON.parse(el.dataset.curve);
    const measure = el.dataset.measure;
    const hits = measure === "hits";
    const passes = [...new Set(curve.lines.map((l) => l.pass))];
    // A pass is a series (its dash and marker); whole documents are the same pass's thinner line with open markers.
    const traces = curve.lines.map((l) => {
      const s = palette.series(passes.indexOf(l.pass));
      const docs = l.granularity === "doc";
      const name = `pass ${l.pass} ${l.order}${curve.tier === "gpu" ? ` (${docs ? "whole documents" : "blocks"})` : ""}`;
      return {
        type: "scatter", mode: "lines+markers", name, meta: `${l.granularity}:${l.pass}`, x: l.x, y: l[measure],
        line: { color: s.colour, dash: s.dash, width: docs ? 1.25 : 2, shape: "hv" },
        marker: { color: s.colour, symbol: docs ? `${s.symbol}-open` : s.symbol, size: docs ? 6 : 5 },
        hovertemplate: `<b>${name}</b><br>%{x:,}: %{y:,.1f}${hits ? " tokens" : " ms"}<extra></extra>`,
      };
    });
    // The marks as vertical lines, each with its own dash, labelled at the top in words (sim/analysis/capacity.py's label).
    const shapes = curve.marks.map((m, i) => ({
      type: "line", xref: "x", yref: "paper", x0: m.x, x1: m.x, y0: 0, y1: 1, name: m.key,
      line: { color: markColour(i), dash: palette.dashes[i % palette.dashes.length], width: 1.5 },
    }));
    // A mark in the right half of the axis is labelled to the left of its line, so its words stay inside the chart.
    // On a phone the plot is narrower than a label: the list above the chart names each line by its dash instead.
    const range = plot.fromZero([...curve.lines.flatMap((l) => l.x), ...curve.marks.map((m) => m.x)]);
    const middle = range ? (range[0] + range[1]) / 2 : Infinity;
    const STEP = 0.09; // paper height of one label's row
    const annotations = el.clientWidth < 560 ? [] : curve.marks.map((m, i) => ({
      x: m.x, xref: "x", y: 1 - STEP * i, yref: "paper", yanchor: "top", text: m.label, showarrow: false, hovertext: m.label,
      xanchor: m.x > middle ? "right" : "left", font: { size: 11, color: markText(i) }, bgcolor: palette.labelBackground(),
    }));
    // The labels get a band of their own at the top of the plot: the y axis reaches above the highest point by their
    // rows, so no label lies over a line (they sat on the pass lines' plateaus).
    const top = Math.max(0, ...traces.flatMap((t) => t.y.filter(Number.isFinite)));
    const band = annotations.length ? STEP * annotations.length + 0.02 : 0;
    const yaxis = top > 0 && band ? { range: [0, top * 1.02 / (1 - band)] } : { rangemode: "tozero" };
    const layout = plot.layout(el, {
      ...TITLED, height: 380, shapes, annotations,
      title: { text: hits ? `${window.kvscope.tierLabel(curve.tier)} hit tokens per pass` : "Predicted mean TTFT per pass", font: { size: 14 } },
      xaxis: { title: { text: curve.x_title }, range }, // from 0: the smallest capacity has a tick left of it
      yaxis: { title: { text: hits ? "hit tokens" : "mean TTFT, ms" }, ...yaxis },
    });
    plot.draw(el, traces, layout);
  }

  // The advisor's Pareto front (no candidate is both cheaper and faster) and the ranked configurations, both by the
  // TTFT figure the target bounds (sim/advise/candidate.py Target.figure), with the bound drawn as a line: a point
  // marked as meeting the target lies on or under it.
  function paretoChart(el) {
    const data = JSON.parse(el.dataset.pareto);
    const figure = data.figure ?? "p90_ms";
    const name = figure.replace("_ms", "");
    const costOf = (r) => (data.priced ? r.dollars_per_hour : r.config.gpu_gib + r.config.cpu_gib_total + r.config.disk_gib_total);
    const label = (c) => `GPU ${format.count(c.gpu_tokens)} tokens${c.cpu_tokens ? `, CPU ${c.cpu_gib_total.toFixed(2)} GiB` : ""}`;
    const hover = `%{text}<br>%{x:.4f}: ${name} %{y:,.1f} ms<extra></extra>`;
    const bound = data.target_ms;
    const [front, meets] = [palette.series(0), palette.series(1)];
    const traces = [
      {
        type: "scatter", mode: "lines+markers", name: "Pareto front", x: data.front.map((p) => p.cost), y: data.front.map((p) => p[figure]),
        text: data.front.map((p) => label(p.config)), line: { color: front.colour, dash: front.dash, shape: "hv", width: 2 },
        marker: { color: front.colour, symbol: front.symbol, size: 7 }, hovertemplate: hover,
      },
      {
        type: "scatter", mode: "markers", name: bound == null ? "meets the target" : `meets the target (${name} ≤ ${format.number(bound)} ms)`,
        x: data.meets.map(costOf), y: data.meets.map((r) => r[figure]),
        text: data.meets.map((r) => label(r.config)), marker: { color: meets.colour, symbol: `${meets.symbol}-open`, size: 10, line: { width: 2 } },
        hovertemplate: hover,
      },
    ];
    const shapes = bound == null ? [] : [{
      type: "line", xref: "paper", x0: 0, x1: 1, yref: "y", y0: bound, y1: bound, layer: "below",
      line: { color: palette.inkSoft(), width: 1.5, dash: "dash" },
    }];
    const annotations = bound == null ? [] : [{
      xref: "paper", x: 1, xanchor: "right", yref: "y", y: bound, yanchor: "bottom", showarrow: false,
      text: `${name} target ${format.number(bound)} ms`, font: { size: 11, color: palette.inkSoft() }, bgcolor: palette.labelBackground(),
    }];
    const layout = plot.layout(el, {
      ...TITLED, height: 360, shapes, annotations, title: { text: `Cost against predicted ${name} TTFT`, font: { size: 14 } },
      // From 0: Plotly's own range starts just left of the cheapest point with its first tick beyond it, unlabelled.
      xaxis: { title: { text: data.priced ? "$ per hour" : "memory, GiB" }, range: plot.fromZero(traces.flatMap((t) => t.x)) },
      yaxis: { title: { text: `${name} TTFT, ms` }, rangemode: "tozero" },
    });
    plot.draw(el, traces, layout);
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
