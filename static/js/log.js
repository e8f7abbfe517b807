// The event log: one line in words per request and configuration, newest first, e.g.
// "req 11 · pass 2 · doc 0: GPU miss, CPU hit: loaded 4,864 tokens (19 chunks), computed 160 tokens
//  (160 past the last full chunk); evicted doc 5 head, 1,408 tokens; doc 6 tail, 3,616 tokens · TTFT 48.7 ms".
// Clicking a line explains that request's misses (its `explain` event) and marks the lines of the
// requests that evicted its tokens.
(() => {
  "use strict";

  const MAX_LINES = 400;
  const { format } = window.kvscope;
  const tierLabel = (tier) => window.kvscope.tierLabel(tier); // static/js/tiers.js: the server's names
  let pending = new Map(); // run -> events of its current request
  let runIndex = new Map();
  let explained = new Map(); // "run seq" -> its explain event

  const docName = (doc) => (doc < 0 ? "the shared prefix" : `doc ${doc}`);

  // A cause in words, by its label (the log's data-causes): kvscope.causes.words.
  const causeWords = (cause, amount) => window.kvscope.causes.words(document.getElementById("event-log"), cause, amount);

  function reset(e) {
    pending = new Map();
    explained = new Map();
    showDetail(null);
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
    if (gpu) parts.push(gpu.hit_tokens ? `GPU hit ${format.count(gpu.hit_tokens)} of ${format.count(gpu.query_tokens)} tokens` : "GPU miss");
    // The offload tiers in the order they were asked (the engine's lookup order).
    for (const tier of Object.keys(lookups)) {
      if (tier === "gpu") continue;
      const load = loads[tier];
      parts.push(load
        ? `${tierLabel(tier)} hit: loaded ${format.count(load.tokens)} tokens (${load.chunks} chunk${load.chunks === 1 ? "" : "s"})`
        : `${tierLabel(tier)} miss`);
    }
    const why = events.find((e) => e.type === "explain");
    if (ttft?.computed_tokens) {
      const causes = why ? Object.entries(why.computed).map(([c, t]) => causeWords(c, format.count(t))).join(", ") : "";
      parts.push(`computed ${format.count(ttft.computed_tokens)} tokens${causes ? ` (${causes})` : ""}`);
    }
    let text = `req ${request.seq} · pass ${request.pass} · ${docName(request.doc)}: ${parts.join(", ")}`;
    const evicts = events.filter((e) => e.type === "evict");
    for (const tier of new Set(evicts.map((e) => e.tier))) {
      const mine = evicts.filter((e) => e.tier === tier);
      const what = mine.map((e) => `${docName(e.doc)} ${e.part}, ${format.count(e.tokens)} tokens`).join("; ");
      text += `; ${tier === "gpu" ? "evicted" : `${tierLabel(tier)} evicted`} ${what}`;
    }
    return text;
  }

  function causeText(map, entries) {
    return Object.entries(map).map(([cause, tokens]) => {
      let text = causeWords(cause, `${format.count(tokens)} tokens`);
      if (cause === "evicted") {
        text += entries.map((e) => ` from ${tierLabel(e.tier)} by ${e.by.map((b) => `req ${b.seq}`).join(", ")}`).join(";");
      }
      return text;
    });
  }

  function showDetail(li) {
    const box = document.getElementById("explain-detail");
    for (const el of document.querySelectorAll("#event-log li.evictor, #event-log li.chosen")) el.classList.remove("evictor", "chosen");
    if (!box) return;
    const why = li && explained.get(`${li.dataset.run} ${li.dataset.seq}`);
    if (!why) {
      box.hidden = true;
      return;
    }
    li.classList.add("chosen");
    const gpuEntries = why.evicted.filter((e) => e.tier === "gpu");
    const ownEntries = why.evicted.filter((e) => e.tier !== "gpu");
    const lines = [`req ${why.seq} · ${why.run}: ${docName(why.doc)}, pass ${why.pass}`];
    const computed = causeText(why.computed, ownEntries.length ? ownEntries : gpuEntries);
    lines.push(`Computed: ${computed.join("; ") || "nothing"}.`);
    if (JSON.stringify(why.gpu_miss) !== JSON.stringify(why.computed)) {
      lines.push(`GPU misses: ${causeText(why.gpu_miss, gpuEntries).join("; ") || "none"}.`);
    }
    lines.push(`An unbounded cache would have served ${format.count(why.infinite_hit_tokens)} tokens.`);
    box.replaceChildren(...lines.map((text) => Object.assign(document.createElement("p"), { textContent: text })));
    box.hidden = false;
    const evictors = new Set(why.evicted.flatMap((e) => e.by.map((b) => String(b.seq))));
    for (const el of document.querySelectorAll(`#event-log li[data-run="${CSS.escape(why.run)}"]`)) {
      if (evictors.has(el.dataset.seq)) el.classList.add("evictor");
    }
  }

  function write(run, events) {
    const log = document.getElementById("event-log");
    const ttft = events.find((e) => e.type === "ttft");
    if (!log || !ttft || !events.some((e) => e.type === "request")) return;
    const why = events.find((e) => e.type === "explain");
    if (why) explained.set(`${run} ${why.seq}`, why);
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
    time.textContent = `TTFT ${format.ms(ttft.ttft_ms)} ms`;
    li.append(badge, text, time);
    if (why) {
      li.tabIndex = 0;
      li.classList.add("explainable");
      li.title = "Why were its tokens computed?";
    }
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
      return note(`${ev.run}: pass ${s.pass} (${s.order}) done · p50 ${format.ms(s.p50_ms)} ms, mean ${format.ms(s.mean_ms)} ms · GPU hits ${format.count(s.gpu_hit_tokens)} tokens`, "log-pass");
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
  document.addEventListener("click", (e) => {
    const li = e.target.closest?.("#event-log li.explainable");
    if (li) showDetail(li);
  });
  document.addEventListener("keydown", (e) => {
    const li = e.target.closest?.("#event-log li.explainable");
    if (li && (e.key === "Enter" || e.key === " ")) {
      e.preventDefault();
      showDetail(li);
    }
  });
})();
