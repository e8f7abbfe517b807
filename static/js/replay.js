// Trace replay panel: the form posts (HTMX, multipart so an uploaded trace comes along) to /ui/replay, whose answer
// (replay/result.html) holds the tier table and, in data-replay-chart, what the two charts draw: the hit ratio of each
// tier per time window, and every request's TTFT. A refused replay is answered by the server with the fields and
// their errors; forms.js shows the busy and stale states. Events are delegated from the document because the panel
// is swapped in after the page loads.
(() => {
  "use strict";

  // The page's palette (static/js/palette.js): a tier's hits take its source's colour and marker, and a dash per
  // series, so that no series is told apart by colour alone.
  const { palette, plot, tierLabel } = window.kvscope;
  const TIER_STYLE = {
    gpu: { color: palette.source("gpu").colour, symbol: palette.source("gpu").symbol, dash: "solid", label: tierLabel("gpu") },
    cpu: { color: palette.source("cpu").colour, symbol: palette.source("cpu").symbol, dash: "dash", label: tierLabel("cpu") },
  };
  // A tier behind the CPU (a --storage-tier) is drawn as the palette draws any further tier, dotted, by its name.
  function tierStyle(name) {
    const s = palette.source(name);
    return TIER_STYLE[name] || { color: s.colour, symbol: s.symbol, dash: "dot", label: tierLabel(name) };
  }
  // Each request is drawn by where most of its prompt came from: a tier of the replay, or computed.
  function sourceStyles(result) {
    return [...result.tiers.map((t) => t.name), "computed"].map((name) => {
      const s = palette.source(name);
      return [name, s.colour, s.symbol, `mostly ${name === "gpu" ? "a GPU hit" : s.label}`];
    });
  }

  function el(id) { return document.getElementById(id); }

  function hitChart(result) {
    const names = result.tiers.map((t) => t.name);
    const x = result.timeline.map((w) => (w.start_ms + w.end_ms) / 2 / 1000);
    const traces = names.map((name, i) => {
      const style = tierStyle(name);
      return {
        type: "scatter", mode: "lines+markers", name: `${style.label} hit ratio`, x,
        y: result.timeline.map((w) => w.tiers[i].hit_ratio),
        customdata: result.timeline.map((w) => [w.tiers[i].hit_blocks, w.tiers[i].lookup_blocks, w.requests]),
        line: { color: style.color, dash: style.dash, width: 2 },
        marker: { color: style.color, symbol: style.symbol, size: 7 },
        hovertemplate: `<b>${style.label}</b> · %{x:.0f} s<br>%{y:.1%} = %{customdata[0]:,} of %{customdata[1]:,} blocks`
          + " · %{customdata[2]} requests<extra></extra>",
      };
    });
    const div = el("replay-hit-chart");
    const layout = plot.layout(div, {
      title: { text: "Hit ratio per tier, per time window", font: { size: 14 } }, height: 340, margin: { t: 72 },
      xaxis: { title: { text: "trace time, s" } },
      yaxis: { title: { text: "hit ratio, % of blocks looked up" }, range: [0, 1], tickformat: ".0%" },
    });
    plot.draw(div, traces, layout);
  }

  function ttftChart(result) {
    // With tiers behind the CPU, the hover also says what they served (the record's disk_hit_tokens: all of them).
    const behind = result.tiers.length > 2 ? " · behind the CPU %{customdata[5]:,}" : "";
    const traces = sourceStyles(result).map(([source, color, symbol, label]) => {
      const mine = result.requests.filter((r) => r.source === source);
      return {
        type: "scatter", mode: "markers", name: label, meta: source,
        x: mine.map((r) => r.timestamp_ms / 1000), y: mine.map((r) => r.ttft_ms),
        // The record's seq (the request's number everywhere: the CLI's, the JSON's, the event log's).
        customdata: mine.map((r) => [r.seq, r.prompt_tokens, r.gpu_hit_tokens, r.cpu_hit_tokens, r.computed_tokens,
          r.disk_hit_tokens]),
        marker: { color, symbol, size: 6, opacity: 0.75 },
        hovertemplate: "request %{customdata[0]} · %{customdata[1]:,} tokens<br>%{y:.1f} ms · GPU %{customdata[2]:,}"
          + ` · CPU %{customdata[3]:,}${behind} · computed %{customdata[4]:,}<extra></extra>`,
      };
    });
    const div = el("replay-ttft-chart");
    const layout = plot.layout(div, {
      title: { text: "Time to first token, per request", font: { size: 14 } }, height: 360, margin: { t: 72 },
      xaxis: { title: { text: "arrival, s" } },
      // One way of writing every tick: 100, 1,000, 10,000 (Plotly's own gave "1000" beside "10k").
      yaxis: { title: { text: "TTFT, ms (log)" }, type: "log", dtick: 1, exponentformat: "none", separatethousands: true },
    });
    plot.draw(div, traces, layout);
  }

  // The server's answer swapped in: the charts drawn from its data, once each.
  function drawAnswer() {
    const area = el("replay-result");
    const holder = area?.querySelector("[data-replay-chart]:not([data-drawn])");
    if (!holder || !window.Plotly) return;
    holder.dataset.drawn = "true";
    const answer = JSON.parse(holder.dataset.replayChart);
    area.hidden = false;
    hitChart(answer);
    ttftChart(answer);
    el("replay").dataset.state = "done";
  }

  // No answer from the server's partials (the network, a 5xx): said where the status stands.
  window.kvscope.forms.follow("replay-form", "replay", "replay-status", "Replaying…", "Replay failed");

  document.addEventListener("htmx:after:swap", drawAnswer);
})();
