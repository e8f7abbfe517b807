// Fleet panel: the form posts (HTMX) to /ui/fleet, whose answer (fleet/result.html) holds the per-router table, each
// replica's strip per router and, in data-fleet-chart, each router's TTFTs, drawn here as one chart: the share of
// requests whose TTFT is at most each value, one line per router. A refused fleet is answered with the fields and
// their errors; forms.js shows the busy and stale states. Events are delegated from the document because the panel
// is swapped in after the page loads.
(() => {
  "use strict";

  const { palette, plot } = window.kvscope;

  function el(id) { return document.getElementById(id); }

  // Routers are no configurations, tiers or sources: each is one series ink with a dash and marker of its own.
  function ttftChart(routers) {
    const traces = routers.map(({ router, ttft_ms: ttfts }, i) => {
      const style = palette.series(i);
      return {
        type: "scatter", mode: "lines+markers", name: router, x: ttfts, y: ttfts.map((_, k) => (k + 1) / ttfts.length),
        line: { color: style.colour, dash: style.dash, width: 2, shape: "hv" },
        marker: { color: style.colour, symbol: style.symbol, size: 5, maxdisplayed: 12 },
        hovertemplate: `<b>${router}</b><br>%{y:.0%} of requests within %{x:,.1f} ms<extra></extra>`,
      };
    });
    const div = el("fleet-ttft-chart");
    const layout = plot.layout(div, {
      title: { text: "Time to first token, per router", font: { size: 14 } }, height: 340, margin: { t: 72 },
      xaxis: { title: { text: "TTFT, ms (log)" }, type: "log", dtick: 1, exponentformat: "none", separatethousands: true },
      yaxis: { title: { text: "share of requests at most this TTFT" }, range: [0, 1.02], tickformat: ".0%" },
    });
    plot.draw(div, traces, layout);
  }

  // The server's answer swapped in: the chart drawn from its data, once.
  function drawAnswer() {
    const area = el("fleet-result");
    const holder = area?.querySelector("[data-fleet-chart]:not([data-drawn])");
    if (!holder || !window.Plotly) return;
    holder.dataset.drawn = "true";
    area.hidden = false;
    ttftChart(JSON.parse(holder.dataset.fleetChart));
    // The answer is under the form: brought into view from its status line when it starts below the window's middle
    // (on a phone it is a screen or two down; at 1440x900 the table's rows began at the window's foot).
    const status = el("fleet-status");
    if (status.getBoundingClientRect().top > innerHeight / 2) status.scrollIntoView({ block: "start" });
    el("fleet").dataset.state = "done";
  }

  // The strips' menu: the chosen router's stack shown, the others hidden.
  document.addEventListener("change", (evt) => {
    const menu = evt.target;
    if (!(menu instanceof HTMLSelectElement) || menu.dataset.role !== "lanes-router") return;
    for (const stack of el("fleet-result").querySelectorAll(".fleet-stack")) stack.hidden = stack.dataset.router !== menu.value;
  });

  // No answer from the server's partials (the network, a 5xx): said where the status stands.
  window.kvscope.forms.follow("fleet-form", "fleet", "fleet-status", "Serving…", "The fleet failed");

  document.addEventListener("htmx:after:swap", drawAnswer);
})();
