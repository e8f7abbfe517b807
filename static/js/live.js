// Live runs: reads the stream of #live-stream (opened by htmx's SSE extension), plots each request's measured TTFT
// (solid) beside the shadow simulation's prediction (dashed) on #live-chart, adds a row to #live-table as each
// pass of each target completes, and lists warnings and errors. Events are applied as they arrive: the servers
// set the pace, so there is no player here; points reach the chart at most once per animation frame (plot.extend).
(() => {
  "use strict";

  const { palette, plot } = window.kvscope;

  const { ms: fmtMs, count: fmtTokens, times: fmtTimes } = window.kvscope.format;

  let run = null; // the run on screen

  function setup(view) {
    const targets = JSON.parse(view.dataset.targets);
    const requests = Number(view.dataset.requests);
    const passes = JSON.parse(view.dataset.passes);
    run = {
      view, targets, requests,
      measuredTrace: new Map(targets.map((t, i) => [t, 2 * i])),
      simulatedTrace: new Map(targets.map((t, i) => [t, 2 * i + 1])),
      measured: new Map(targets.map((t) => [t, 0])),
      unknownHits: new Set(), // "target|pass" with a request whose hits the server could not tell
      passes: new Map(), // "target|pass" -> summary
      finished: new Set(),
      failed: new Set(),
      ended: false,
    };
    const chart = document.getElementById("live-chart");
    if (!chart || !window.Plotly) return;
    const traces = [];
    targets.forEach((t, i) => {
      const colour = palette.run(palette.runIndex(t, i)); // a target named gpu is the gpu configuration's colour
      traces.push({
        type: "scatter", mode: "lines+markers", name: `${t} measured`, x: [], y: [], customdata: [],
        line: { color: colour, width: 2 }, marker: { color: colour, size: 8, symbol: "circle" },
        hovertemplate: `<b>${t}</b> measured · request %{x}<br>%{y:.1f} ms · %{customdata}<extra></extra>`,
      });
      traces.push({
        type: "scatter", mode: "lines+markers", name: `${t} simulated`, x: [], y: [], customdata: [],
        line: { color: colour, width: 1.5, dash: "dash" }, marker: { color: colour, size: 8, symbol: "circle-open" },
        hovertemplate: `<b>${t}</b> simulated · request %{x}<br>%{y:.1f} ms · %{customdata}<extra></extra>`,
      });
    });
    plot.drain();
    window.Plotly.newPlot(chart, traces, plot.layout(chart, {
      height: 340, margin: { t: 64 },
      xaxis: { title: { text: "request" }, range: [-0.5, requests - 0.5] },  // seq 0 .. requests - 1
      yaxis: { title: { text: "TTFT, ms" }, rangemode: "tozero", autorange: true },
      ...window.kvscope.passMarks(passes, chart),
    }, traces.map((t) => t.name)), plot.config);
  }

  function current() {
    const view = document.getElementById("live-view");
    if (view && (!run || run.view !== view)) setup(view);
    return run;
  }

  function status(text, state) {
    const el = document.getElementById("live-status");
    if (!el) return;
    el.textContent = text;
    if (state) el.dataset.state = state;
  }

  function progress() {
    const done = [...run.measured.values()].reduce((a, b) => a + b, 0);
    const total = run.requests * run.targets.length;
    status(`Measuring: ${done} of ${total} requests answered.`, "running");
  }

  function extend(trace, x, y, note) {
    const chart = document.getElementById("live-chart");
    if (!chart || !window.Plotly || trace === undefined) return;
    plot.extend(chart, trace, { x, y, customdata: note });
  }

  function hits(ev) {
    if (ev.gpu_hit_tokens === null || ev.gpu_hit_tokens === undefined) return `doc ${ev.doc} · hits unknown`;
    const cpu = ev.cpu_hit_tokens === null || ev.cpu_hit_tokens === undefined ? "" : ` · CPU ${fmtTokens(ev.cpu_hit_tokens)}`;
    return `doc ${ev.doc} · GPU ${fmtTokens(ev.gpu_hit_tokens)}${cpu} tokens`;
  }

  function cell(row, text, numeric) {
    const td = document.createElement("td");
    td.textContent = text;
    if (numeric) td.className = "num";
    row.appendChild(td);
    return td;
  }

  function addPassRow(ev) {
    const s = ev.summary;
    const p = s.predicted ?? {};
    const key = `${ev.run}|${s.pass}`;
    run.passes.set(key, s);
    const unknown = run.unknownHits.has(key);
    const body = document.querySelector("#live-table tbody");
    if (!body) return;
    const row = document.createElement("tr");
    row.dataset.run = ev.run;
    row.dataset.pass = String(s.pass);
    const th = document.createElement("th");
    th.scope = "row";
    const badge = document.createElement("span");
    badge.className = `live-badge live-run-${palette.runIndex(ev.run, run.targets.indexOf(ev.run))}`; // --run-0 .. --run-3
    badge.textContent = ev.run;
    th.appendChild(badge);
    row.appendChild(th);
    cell(row, `${s.pass} ${s.order}`);
    cell(row, fmtMs(s.p50_ms), true).dataset.col = "p50";
    cell(row, fmtMs(p.p50_ms), true).dataset.col = "sim-p50";
    cell(row, fmtMs(s.mean_ms), true).dataset.col = "mean";
    cell(row, fmtMs(p.mean_ms), true).dataset.col = "sim-mean";
    cell(row, unknown ? "–" : fmtTokens(s.gpu_hit_tokens), true).dataset.col = "gpu-hit";
    cell(row, fmtTokens(p.gpu_hit_tokens), true).dataset.col = "sim-gpu-hit";
    cell(row, unknown ? "–" : fmtTokens(s.cpu_hit_tokens), true).dataset.col = "cpu-hit";
    cell(row, fmtTokens(p.cpu_hit_tokens), true).dataset.col = "sim-cpu-hit";
    cell(row, "", true).dataset.col = "speedup";
    // Rows in target order, then pass order.
    const rank = (r) => run.targets.indexOf(r.dataset.run) * 1000 + Number(r.dataset.pass);
    const after = [...body.rows].find((r) => rank(r) > rank(row));
    body.insertBefore(row, after ?? null);
    updateSpeedups();
  }

  function updateSpeedups() {
    const base = run.targets[0];
    for (const row of document.querySelectorAll("#live-table tbody tr")) {
      if (row.dataset.run === base) continue;
      const mine = run.passes.get(`${row.dataset.run}|${row.dataset.pass}`);
      const theirs = run.passes.get(`${base}|${row.dataset.pass}`);
      if (!mine || !theirs) continue;
      const measured = theirs.p50_ms / mine.p50_ms;
      const predicted = (theirs.predicted?.p50_ms ?? NaN) / (mine.predicted?.p50_ms ?? NaN);
      row.querySelector("[data-col=speedup]").textContent = `${fmtTimes(measured)} (${fmtTimes(predicted)})`;
    }
  }

  function log(kind, text) {
    const list = document.getElementById("live-log");
    if (!list) return;
    const item = document.createElement("li");
    item.className = `live-${kind}`;
    const label = document.createElement("strong");
    label.textContent = kind === "error" ? "Error: " : "Warning: ";
    item.append(label, text);
    list.appendChild(item);
  }

  function finish() {
    if (!run || run.ended) return;
    run.ended = true;
    plot.drain(); // the last points are on the chart when the status says done
    const done = [...run.measured.values()].reduce((a, b) => a + b, 0);
    if (run.failed.size) {
      status(`Stopped: ${[...run.failed].join(", ")} failed (see below). ${done} requests were measured; they are in the download.`, "error");
    } else if (run.finished.size === run.targets.length) {
      status(`Done: ${done} requests measured on ${run.targets.join(" and ")}.`, "done");
    } else {
      status(`The stream ended early: ${done} requests measured.`, "error");
    }
  }

  function receive(ev) {
    if (!current()) return;
    switch (ev.type) {
      case "ttft":
        extend(run.simulatedTrace.get(ev.run), ev.seq, ev.ttft_ms, `doc ${ev.doc} · ${palette.source(ev.source).tooltip}`);
        break;
      case "measured":
        if (ev.gpu_hit_tokens === null || ev.gpu_hit_tokens === undefined) run.unknownHits.add(`${ev.run}|${ev.pass}`);
        run.measured.set(ev.run, (run.measured.get(ev.run) ?? 0) + 1);
        extend(run.measuredTrace.get(ev.run), ev.seq, ev.ttft_ms, hits(ev));
        progress();
        break;
      case "pass":
        addPassRow(ev);
        break;
      case "warning":
        log("warning", `${ev.run}: ${ev.message}`);
        break;
      case "error":
        if (ev.run) run.failed.add(ev.run);
        log("error", ev.message);
        break;
      case "done":
        run.finished.add(ev.run);
        break;
      default:
        break;
    }
  }

  window.kvscope.stream.take("live-stream", receive); // every message of #live-stream (static/js/stream.js)

  document.addEventListener("htmx:sse:close", (evt) => {
    if (evt.target?.id === "live-stream") finish();
  });

  document.addEventListener("htmx:error", (evt) => {
    if (evt.target?.id !== "live-stream" || !current()) return;
    status("The live stream could not be opened.", "error");
  });

  document.addEventListener("htmx:after:swap", () => { current(); });

  // A kept run's stream (templates/live/run.html): opened here, when this script's listeners are in place, as soon
  // as htmx has taken the element; an event htmx would wait for (DOMContentLoaded) may have passed before it started.
  const kept = document.querySelector("#live-stream[data-kept]");
  if (kept) {
    const open = () => (kept.hasAttribute("data-htmx-powered") ? window.htmx.trigger(kept, "kvscope-open") : requestAnimationFrame(open));
    open();
  }
})();
