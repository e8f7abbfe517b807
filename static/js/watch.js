// Watch mode: each upstream's <article class="watch-upstream"> follows its SSE stream (data-stream) and draws what
// arrives: `occupancy` redraws a tier's to-scale bar (one segment per resident prefix, largest first, or in the
// order the event lists them: the twin's LRU order, next to be evicted first, as the order toggle picks), `store` and
// `evict` flash it, `measured` and the twin's `ttft` add points to the TTFT chart and rows to the requests table,
// `divergence` rewrites the line saying whether the twin and the server hold the same blocks, and the twin's `explain`
// (sent just before its `ttft`) says in the request's row why the twin computed what it computed, and adds to the
// per-cause totals, drawn as the main page's cause bar (kvscope.causes.stack). Points reach the chart
// at most once per animation frame (plot.extend); measured and predicted share the upstream's colour (its badge's too), told apart by
// line and marker as on the live chart.
(() => {
  "use strict";

  const { palette, plot, causes } = window.kvscope;

  const MAX_ROWS = 50;
  const TIER_NAMES = { gpu: "GPU", cpu: "CPU", storage: "STORAGE" };
  const { count: fmt, ms: fmtMs } = window.kvscope.format;

  function part(view, role) { return view.querySelector(`[data-role="${role}"]`); }
  // An upstream is a server with its own configuration, coloured as a live target is: by its name when it names one
  // ("gpu+cpu"), else by its place in the list; its badge (--upstream, watch.css) and its chart share the colour.
  const colourOf = (view) => palette.run(palette.runIndex(view.dataset.name, [...document.querySelectorAll(".watch-upstream")].indexOf(view)));

  function tierRow(view, tier) {
    const tiers = part(view, "tiers");
    let row = tiers.querySelector(`.watch-tier[data-tier="${tier}"]`);
    if (row) return row;
    row = document.createElement("div");
    row.className = "watch-tier";
    row.dataset.tier = tier;
    const name = document.createElement("span");
    name.className = "watch-tier-name";
    name.textContent = TIER_NAMES[tier] || tier.toUpperCase();
    const bar = document.createElement("div");
    bar.className = "watch-bar";
    bar.setAttribute("role", "img");
    const label = document.createElement("span");
    label.className = "watch-tier-label";
    row.append(name, bar, label);
    // GPU first, then CPU, then the rest, as the tiers are looked up.
    const order = ["gpu", "cpu", "storage"];
    const rank = (t) => (order.indexOf(t) < 0 ? order.length : order.indexOf(t));
    const after = [...tiers.children].find((r) => rank(r.dataset.tier) > rank(tier));
    tiers.insertBefore(row, after || null);
    return row;
  }

  // The last occupancy of each tier per view, to redraw when the order toggle changes.
  const lastOccupancy = new WeakMap();

  function order(view) {
    const picked = view.querySelector('[data-role="order"] input:checked');
    return picked ? picked.value : "size";
  }

  function occupancy(view, e) {
    if (!lastOccupancy.has(view)) lastOccupancy.set(view, new Map());
    lastOccupancy.get(view).set(e.tier, e);
    const row = tierRow(view, e.tier);
    const bar = row.querySelector(".watch-bar");
    const capacity = Math.max(e.capacity_tokens, e.used_tokens, 1);
    // The event lists prefixes in the twin's LRU order where it knows it ("other", the rest summed, last).
    const listed = Object.entries(e.docs);
    const prefixes = order(view) === "lru" ? listed : listed.sort((a, b) => b[1] - a[1]);
    bar.replaceChildren(...prefixes.map(([root, tokens]) => {
      const seg = document.createElement("div");
      seg.className = "watch-seg";
      seg.style.width = `${(100 * tokens) / capacity}%`;
      seg.title = `${root === "other" ? "smaller prefixes" : `prefix ${root}`}: ${fmt(tokens)} tokens`;
      seg.dataset.tokens = tokens;
      seg.dataset.root = root;
      return seg;
    }));
    const label = `${TIER_NAMES[e.tier] || e.tier}: ${fmt(e.used_tokens)} of ${fmt(e.capacity_tokens)} tokens in ${prefixes.length} prefixes`;
    bar.setAttribute("aria-label", label);
    row.querySelector(".watch-tier-label").textContent = label;
  }

  function flash(view, tier, kind) {
    const row = tierRow(view, tier);
    row.removeAttribute("data-flash");
    void row.offsetWidth; // restart the animation
    row.dataset.flash = kind;
  }

  function chart(view) {
    const div = part(view, "chart");
    if (!window.Plotly || div.dataset.ready) return div;
    div.dataset.ready = "1";
    const trace = (name, colour, dash, symbol) => ({
      type: "scatter", mode: "lines+markers", name, x: [], y: [],
      line: { color: colour, width: dash ? 1.5 : 2, dash: dash ? "dash" : "solid" }, marker: { color: colour, size: 8, symbol },
      hovertemplate: `<b>${name}</b> · request %{x}<br>%{y:.1f} ms<extra></extra>`,
    });
    const colour = colourOf(view);
    window.Plotly.newPlot(div, [trace("measured", colour, false, "circle"), trace("twin's prediction", colour, true, "circle-open")],
      plot.layout(div, {
        height: 260,
        xaxis: { title: { text: "proxied request" } },
        yaxis: { title: { text: "TTFT, ms" }, rangemode: "tozero" },
      }), plot.config);
    return div;
  }

  function point(view, trace, x, y) {
    const div = chart(view);
    if (window.Plotly && y !== null && y !== undefined) plot.extend(div, trace, { x, y });
  }

  function row(view, seq) {
    const body = part(view, "requests");
    const id = `watch-${view.dataset.name}-req-${seq}`;
    let tr = document.getElementById(id);
    if (tr) return tr;
    tr = document.createElement("tr");
    tr.id = id;
    for (let i = 0; i < 7; i++) {
      const td = document.createElement("td");
      if (i < 6) td.className = "num";
      td.textContent = i === 0 ? String(seq) : "–";
      tr.append(td);
    }
    body.prepend(tr);
    while (body.children.length > MAX_ROWS) body.lastElementChild.remove();
    return tr;
  }

  function measured(view, e) {
    const cells = row(view, e.seq).children;
    cells[1].textContent = fmt(e.prompt_tokens);
    cells[2].textContent = fmtMs(e.ttft_ms);
    cells[4].textContent = fmt(e.gpu_hit_tokens);
    cells[5].textContent = fmt(e.cpu_hit_tokens);
    if (e.hits_unknown) {
      // Unknown hits say why, in the cell (its title) and under the table (the latest such request), not a bare dash.
      for (const cell of [cells[4], cells[5]]) {
        cell.textContent = "unknown";
        cell.title = `Hits unknown: ${e.hits_unknown}.`;
      }
      hitsNote(view).textContent = `Request ${e.seq}: hits unknown: ${e.hits_unknown}.`;
    }
    point(view, 0, e.seq, e.ttft_ms);
  }

  /** The line under the requests table that says why the latest request with unknown hits has them unknown. */
  function hitsNote(view) {
    let note = view.querySelector("[data-role=hits-unknown]");
    if (!note) {
      note = document.createElement("p");
      note.dataset.role = "hits-unknown";
      note.className = "watch-note";
      const table = part(view, "requests").closest("table");
      (table.parentElement.classList.contains("table-wrap") ? table.parentElement : table).after(note);
    }
    return note;
  }

  function predicted(view, e) {
    row(view, e.seq).children[3].textContent = fmtMs(e.ttft_ms);
    point(view, 1, e.seq, e.ttft_ms);
  }

  // The twin's computed tokens by cause, over every request of the view: {tokens by cause, requests}.
  const causeTotals = new WeakMap();

  /** "1 for the last token, 159 first seen": a cause map in the server's precedence order, in words (causes.words). */
  function causeText(div, map) {
    const parts = causes.causesOf(div).filter(([name]) => map[name]).map(([name]) => causes.words(div, name, fmt(map[name])));
    return parts.length ? parts.join(", ") : "none";
  }

  function explained(view, e) {
    const div = part(view, "causes");
    row(view, e.seq).children[6].textContent = causeText(div, e.computed);
    if (!causeTotals.has(view)) causeTotals.set(view, { computed: {}, requests: 0 });
    const totals = causeTotals.get(view);
    totals.requests += 1;
    for (const [cause, tokens] of Object.entries(e.computed)) totals.computed[cause] = (totals.computed[cause] ?? 0) + tokens;
    const sum = Object.values(totals.computed).reduce((a, b) => a + b, 0);
    part(view, "causes-total").textContent =
      `The twin computed ${fmt(sum)} tokens over ${fmt(totals.requests)} requests: ${causeText(div, totals.computed)}.`;
    if (!window.Plotly) return;
    div.hidden = false;
    plot.redraw(div, () => causes.stack(div, [{ label: `${view.dataset.name} twin, all requests`, computed: totals.computed }], 240));
  }

  function divergence(view, e) {
    const line = part(view, "divergence");
    const tier = TIER_NAMES[e.tier] || e.tier;
    const blocks = `server holds ${fmt(e.server_blocks)} ${tier} blocks, twin ${fmt(e.twin_blocks)}: ${fmt(e.differ)} blocks differ`;
    line.dataset.state = e.differ ? "differ" : "agree";
    line.replaceChildren(document.createTextNode(e.differ ? blocks : `${blocks} (they agree)`));
    if (e.held_before && e.first_parted === null) {
      // A twin started after the server had cached blocks differs from the start: no request parted them.
      line.append(document.createTextNode(` · the server held ${fmt(e.held_before)} blocks before the twin started`));
    } else if (e.first_parted !== null && e.first_parted !== undefined) {
      const link = document.createElement("a");
      link.href = `#watch-${view.dataset.name}-req-${e.first_parted}`;
      link.textContent = `request ${e.first_parted}`;
      line.append(document.createTextNode(" · they parted after "), link);
    }
  }

  function status(view, text, state) {
    const el = part(view, "status");
    el.textContent = text;
    el.dataset.state = state;
  }

  function follow(view) {
    const name = view.dataset.name;
    view.style.setProperty("--upstream", colourOf(view));
    const toggle = part(view, "order");
    if (toggle) toggle.addEventListener("change", () => {
      for (const e of (lastOccupancy.get(view) || new Map()).values()) occupancy(view, e);
    });
    let events = 0;
    const handlers = {
      occupancy: (e) => { occupancy(view, e); status(view, `${fmt(events)} events received.`, "ok"); },
      store: (e) => flash(view, e.tier, "store"),
      evict: (e) => flash(view, e.tier, "evict"),
      measured: (e) => measured(view, e),
      explain: (e) => { if (e.run === `${name} twin`) explained(view, e); },
      ttft: (e) => { if (e.run === `${name} twin`) predicted(view, e); },
      divergence: (e) => divergence(view, e),
      warning: (e) => status(view, e.message, "warning"),
      error: (e) => status(view, e.message, "warning"),
    };
    const source = window.kvscope.stream.follow(view.dataset.stream, Object.keys(handlers), (e, kind) => {
      events += 1;
      handlers[kind](e);
    });
    source.onerror = () => {
      if (view.dataset.keptRun) { // a kept run's stored stream ends once it is all sent: replayed, not broken
        source.close();
        status(view, `Replayed: ${fmt(events)} events of kept run ${view.dataset.keptRun}.`, "done");
        return;
      }
      status(view, "The stream was interrupted; reconnecting…", "warning");
    };
  }

  function start(root) {
    for (const view of root.querySelectorAll(".watch-upstream:not([data-following])")) {
      view.dataset.following = "1";
      follow(view);
    }
  }

  document.addEventListener("htmx:after:swap", () => start(document));
  document.addEventListener("DOMContentLoaded", () => start(document));
})();
