// The event log: one line in words per request and configuration, newest first, e.g.
// "req 11 · pass 2 · doc 0: GPU miss, CPU hit: loaded 4,864 tokens (19 chunks), computed 160 tokens;
//  evicted doc 5 head, 1,408 tokens; doc 6 tail, 3,616 tokens · TTFT 48.7 ms".
(() => {
  "use strict";

  const MAX_LINES = 400;
  const fmt = new Intl.NumberFormat("en-US");
  const TIER = { gpu: "GPU", cpu: "CPU", disk: "disk" };
  let pending = new Map(); // run -> events of its current request
  let runIndex = new Map();

  const docName = (doc) => (doc < 0 ? "the shared prefix" : `doc ${doc}`);

  function reset(e) {
    pending = new Map();
    runIndex = new Map((e.detail?.runs ?? []).map((run, i) => [run, i]));
    document.getElementById("event-log")?.replaceChildren();
  }

  function sentence(events) {
    const request = events.find((e) => e.type === "request");
    const ttft = events.find((e) => e.type === "ttft");
    const lookups = Object.fromEntries(events.filter((e) => e.type === "lookup").map((e) => [e.tier, e]));
    const loads = Object.fromEntries(events.filter((e) => e.type === "load").map((e) => [e.tier, e]));
    const parts = [];
    const gpu = lookups.gpu;
    if (gpu) parts.push(gpu.hit_tokens ? `GPU hit ${fmt.format(gpu.hit_tokens)} of ${fmt.format(gpu.query_tokens)} tokens` : "GPU miss");
    for (const tier of ["cpu", "disk"]) {
      const lookup = lookups[tier];
      if (!lookup) continue;
      const load = loads[tier];
      parts.push(load
        ? `${TIER[tier]} hit: loaded ${fmt.format(load.tokens)} tokens (${load.chunks} chunk${load.chunks === 1 ? "" : "s"})`
        : `${TIER[tier]} miss`);
    }
    if (ttft?.computed_tokens) parts.push(`computed ${fmt.format(ttft.computed_tokens)} tokens`);
    let text = `req ${request.seq + 1} · pass ${request.pass} · ${docName(request.doc)}: ${parts.join(", ")}`;
    const evicts = events.filter((e) => e.type === "evict");
    for (const tier of ["gpu", "cpu", "disk"]) {
      const mine = evicts.filter((e) => e.tier === tier);
      if (!mine.length) continue;
      const what = mine.map((e) => `${docName(e.doc)} ${e.part}, ${fmt.format(e.tokens)} tokens`).join("; ");
      text += `; ${tier === "gpu" ? "evicted" : `${TIER[tier]} evicted`} ${what}`;
    }
    return text;
  }

  function write(run, events) {
    const log = document.getElementById("event-log");
    const ttft = events.find((e) => e.type === "ttft");
    if (!log || !ttft || !events.some((e) => e.type === "request")) return;
    const li = document.createElement("li");
    li.dataset.run = run;
    li.dataset.seq = String(ttft.seq);
    li.dataset.source = ttft.source;
    const badge = document.createElement("span");
    badge.className = `run-badge run-${runIndex.get(run) ?? 0}`;
    badge.textContent = run;
    const text = document.createElement("span");
    text.className = "log-text";
    text.textContent = sentence(events);
    const time = document.createElement("span");
    time.className = `log-ttft source-${ttft.source}`;
    time.textContent = `TTFT ${ttft.ttft_ms.toFixed(1)} ms`;
    li.append(badge, text, time);
    log.prepend(li);
    while (log.children.length > MAX_LINES) log.lastElementChild.remove();
  }

  function note(text, cls) {
    const log = document.getElementById("event-log");
    if (!log) return;
    const li = document.createElement("li");
    li.className = cls;
    li.textContent = text;
    log.prepend(li);
  }

  function handle(ev) {
    if (ev.type === "error") return note(`Stopped: ${ev.message}`, "log-error");
    if (ev.type === "pass") {
      const s = ev.summary;
      return note(`${ev.run}: pass ${s.pass} (${s.order}) done · p50 ${s.p50_ms.toFixed(1)} ms, mean ${s.mean_ms.toFixed(1)} ms · GPU hits ${fmt.format(s.gpu_hit_tokens)} tokens`, "log-pass");
    }
    if (ev.seq === undefined) return;
    if (ev.type === "request") pending.set(ev.run, []);
    const events = pending.get(ev.run);
    if (!events) return;
    events.push(ev);
    if (ev.type === "ttft") {
      write(ev.run, events);
      pending.delete(ev.run);
    }
  }

  document.addEventListener("kvscope:reset", reset);
  document.addEventListener("kvscope:event", (e) => handle(e.detail.event));
})();
