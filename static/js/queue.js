// TTFT over arrival time (under load): each request is a vertical stroke at its arrival, from 0 to its TTFT, its
// queueing (the pale, wide foot) stacked under the rest of its TTFT (the solid stroke, a dot at its top), in its
// configuration's colour; from the `ttft` events of the stepped engine's stream, which carry `queue_ms` and
// `arrival_ms`. Strokes, not bars: a bar's width would follow the closest two arrivals (a few ms apart under load)
// and leave the rest hairlines; a stroke keeps its width in pixels. Requests that arrive together share a stroke,
// each with its own dot.
(() => {
  "use strict";

  const { palette, plot } = window.kvscope;
  const FOOT_PX = 9; // the queueing foot's width
  const REST_PX = 3;
  let div = null;
  let traceOf = new Map(); // run -> index of its queue trace (its rest follows)

  function reset() {
    div = document.getElementById("queue-chart");
    if (!div || !window.Plotly) return;
    const runs = JSON.parse(div.dataset.runs);
    traceOf = new Map(runs.map((run, i) => [run, 2 * i]));
    const traces = runs.flatMap((run) => {
      const colour = palette.config(run);
      const common = { type: "scatter", x: [], y: [], customdata: [], legendgroup: run, connectgaps: false };
      return [
        { ...common, mode: "lines", name: `${run}: queued`, opacity: 0.4, line: { color: colour, width: FOOT_PX }, marker: { size: [] },
          hovertemplate: `<b>${run}</b> · request %{customdata}<br>queued until %{y:.1f} ms after arrival<extra></extra>` },
        { ...common, mode: "lines+markers", name: `${run}: prefill and the rest`, line: { color: colour, width: REST_PX },
          marker: { color: colour, size: [], line: { color: palette.plotBackground(), width: 1 } },
          hovertemplate: `<b>${run}</b> · request %{customdata}<br>TTFT %{y:.1f} ms<extra></extra>` },
      ];
    });
    const layout = plot.layout(div, {
      height: 340,
      xaxis: { title: { text: "arrival, ms" } }, // padded by Plotly: the strokes at 0 stay whole
      yaxis: { title: { text: "TTFT, ms" }, rangemode: "tozero" },
    }, traces.map((t) => t.name));
    window.Plotly.newPlot(div, traces, layout, plot.config);
  }

  /** A stroke from `from` to `to` at `x`, ended by a gap (null) so that strokes are not joined. */
  function stroke(i, x, from, to, seq, dot) {
    for (const [y, size] of [[from, 0], [to, dot], [null, 0]]) {
      plot.extend(div, i, { x: y === null ? null : x, y, customdata: seq, "marker.size": size });
    }
  }

  function ttft(ev) {
    const i = traceOf.get(ev.run);
    if (i === undefined || !div || ev.queue_ms === undefined) return;
    if (ev.queue_ms > 0) stroke(i, ev.arrival_ms, 0, ev.queue_ms, ev.seq, 0);
    stroke(i + 1, ev.arrival_ms, ev.queue_ms, ev.ttft_ms, ev.seq, 7);
  }

  document.addEventListener("kvscope:reset", reset);
  document.addEventListener("kvscope:event", (e) => { if (e.detail.event.type === "ttft") ttft(e.detail.event); });
})();
