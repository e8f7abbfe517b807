// The lanes panel: every tier's capacity bar holds one tile per cached document, to scale; tiles grow in on
// store and load, flash on a hit, and shrink out on eviction. Order within a bar is recency as this tier saw it:
// the requested document moves to the right end (on the GPU always; on CPU or disk when it was read or written
// there), so the left end is what LRU evicts next. Under each bar the last evictions stay as ghosts, each with the
// request that caused it; a GPU eviction whose document the CPU tier still holds is drawn joined to that CPU tile
// (the next request for it loads from CPU instead of computing). Under load (the stepped engine's stream), the GPU's
// occupancy also says which blocks running requests hold: that part of a tile is drawn pinned (cross-hatched, a dark
// foot), since no eviction can take it; the rest is cached in the free queue, where LRU evicts from. Each `step`
// event says who runs and waits. Follows the player's events (static/js/player.js).
(() => {
  "use strict";

  const { format, tiles } = window.kvscope;
  const { docClass, docName } = tiles;
  const lanes = new Map(); // run -> lane state
  const GHOSTS = 3; // evictions kept in view per tier
  const SVG = "http://www.w3.org/2000/svg";

  function tierState(el) {
    const tier = tiles.state(el);
    // The ghost strip: made here, not in the template, so a page without this script shows no empty strip.
    let ghosts = el.querySelector("[data-role=ghosts]");
    if (!ghosts) {
      ghosts = document.createElement("div");
      ghosts.className = "ghosts";
      ghosts.dataset.role = "ghosts";
      tier.bar.after(ghosts);
    }
    ghosts.replaceChildren();
    ghosts.setAttribute("role", "img");
    ghosts.setAttribute("aria-label", `No evictions from ${tier.label} yet`);
    return { ...tier, ghosts };
  }

  function reset() {
    lanes.clear();
    for (const laneEl of document.querySelectorAll("#run-view .lane")) {
      const tiers = new Map();
      for (const el of laneEl.querySelectorAll(".tier")) tiers.set(el.dataset.tier, tierState(el));
      const totals = {};
      for (const dd of laneEl.querySelectorAll("[data-total]")) {
        totals[dd.dataset.total] = dd;
        dd.textContent = dd.dataset.total === "ttft" ? "0 ms" : "0";
      }
      const now = laneEl.querySelector("[data-role=now]");
      now.textContent = "Waiting for the first request.";
      for (const tier of tiers.values()) {
        tier.used.textContent = "0";
        if (tier.pinned) tier.pinned.textContent = "0";
      }
      const pass = laneEl.querySelector("[data-role=pass]");
      if (pass) pass.textContent = "pass 1";
      let relations = laneEl.querySelector("svg.relations");
      if (!relations) {
        relations = document.createElementNS(SVG, "svg");
        relations.classList.add("relations");
        relations.setAttribute("aria-hidden", "true");
        laneEl.append(relations);
      }
      relations.replaceChildren();
      const steps = laneEl.querySelector("[data-role=step]");
      if (steps) steps.textContent = "No step yet.";
      lanes.set(laneEl.dataset.run, { el: laneEl, tiers, totals, now, pass, relations, steps, sums: null, current: null });
    }
  }

  // -- eviction ghosts ------------------------------------------------------------

  /** One eviction (its parts of one document in one request add up) as a ghost at the strip's left, newest first. */
  function ghost(lane, tier, ev) {
    if (!tier) return;
    let g = [...tier.ghosts.children].find((c) => c.dataset.seq === String(ev.seq) && c.dataset.doc === String(ev.doc));
    if (!g) {
      g = document.createElement("div");
      g.className = `ghost ${docClass(ev.doc)}`;
      g.dataset.seq = String(ev.seq);
      g.dataset.doc = String(ev.doc);
      g.dataset.tokens = "0";
      tier.ghosts.prepend(g);
      while (tier.ghosts.children.length > GHOSTS) tier.ghosts.lastElementChild.remove();
    }
    g.dataset.tokens = String(Number(g.dataset.tokens) + ev.tokens);
    g.style.width = `${(100 * Number(g.dataset.tokens)) / tier.capacity}%`;
    const asked = lane.current?.seq === ev.seq ? ` (asking for ${docName(lane.current.doc)})` : "";
    g.dataset.says = `${docName(ev.doc)}: ${format.count(Number(g.dataset.tokens))} tokens evicted from ${tier.label} by request ${ev.seq}${asked}`;
    describe(tier, g, null);
  }

  /** A ghost's words: what was evicted and by which request, and whether the CPU still holds a copy. */
  function describe(tier, g, copy) {
    g.textContent = `${g.dataset.doc === "-1" ? "S" : g.dataset.doc} ← req ${g.dataset.seq}${copy ? " · in CPU" : ""}`;
    g.title = g.dataset.says + (copy ? `; the CPU tier still holds ${format.count(copy)} tokens of it` : "");
    tier.ghosts.setAttribute("aria-label", `Last evictions from ${tier.label}: ${[...tier.ghosts.children].map((c) => c.title).join("; ")}`);
  }

  /** Lines from each GPU ghost whose document the CPU still holds to that document's CPU tile: each ends, with a dot,
   *  at the top edge of the CPU tier's labels right above the tile, which is outlined. Drawn on to the tile, a line ran
   *  behind the labels and showed only as two short dashes, one above them and one below. */
  function relate(lane) {
    const gpu = lane.tiers.get("gpu");
    const cpu = lane.tiers.get("cpu");
    lane.relations.replaceChildren();
    if (cpu) for (const t of cpu.tiles.values()) t.classList.remove("ghost-copy");
    if (!gpu || !cpu) return;
    const box = lane.el.getBoundingClientRect();
    const head = cpu.el.querySelector(".tier-head")?.getBoundingClientRect();
    lane.relations.setAttribute("viewBox", `0 0 ${box.width} ${box.height}`);
    for (const g of gpu.ghosts.children) {
      const doc = Number(g.dataset.doc);
      const tile = cpu.tiles.get(doc);
      g.dataset.cpuCopy = String(Boolean(tile));
      describe(gpu, g, tile ? cpu.tokens.get(doc) : null);
      if (!tile) continue;
      const a = g.getBoundingClientRect();
      const b = tile.getBoundingClientRect();
      if (a.right > gpu.ghosts.getBoundingClientRect().right + 1) continue; // cut off by a narrow strip: no line to nowhere
      const x2 = b.left + b.width / 2 - box.left;
      const y2 = (head ? head.top : b.top) - box.top;
      const line = document.createElementNS(SVG, "line");
      line.setAttribute("x1", String(a.left + a.width / 2 - box.left));
      line.setAttribute("y1", String(a.bottom - box.top));
      line.setAttribute("x2", String(x2));
      line.setAttribute("y2", String(y2));
      line.dataset.doc = g.dataset.doc;
      const end = document.createElementNS(SVG, "circle");
      end.setAttribute("cx", String(x2));
      end.setAttribute("cy", String(y2));
      end.setAttribute("r", "3");
      lane.relations.append(line, end);
      tile.classList.add("ghost-copy");
    }
  }

  // Tiles change width over a quarter second: the lines are drawn once they have settled, and on resize.
  const pending = new Set();
  let relating = 0;
  function relateSoon(lane) {
    pending.add(lane);
    clearTimeout(relating);
    relating = setTimeout(() => { for (const l of pending) relate(l); pending.clear(); }, 300);
  }
  window.addEventListener("resize", () => { for (const lane of lanes.values()) relateSoon(lane); });

  // Flashes restart their animation, which needs a layout between taking the class off and putting it back: done for
  // all of a frame's flashes at once, so that a run played at full speed costs one layout per frame, not one per event.
  const flashes = new Map(); // element -> set of classes
  let flashFrame = 0;

  function flash(el, cls) {
    if (!el) return;
    if (!flashes.has(el)) flashes.set(el, new Set());
    flashes.get(el).add(cls);
    if (!flashFrame) flashFrame = requestAnimationFrame(flashAll);
  }

  function flashAll() {
    flashFrame = 0;
    for (const [el, classes] of flashes) el.classList.remove(...classes);
    void document.body.offsetWidth; // one layout: the animations restart
    for (const [el, classes] of flashes) if (el.isConnected) el.classList.add(...classes);
    flashes.clear();
  }

  function touch(tier, doc) {
    if (!tier) return;
    const i = tier.order.indexOf(doc);
    if (i >= 0) tier.order.splice(i, 1);
    tier.order.push(doc);
  }

  function occupancy(lane, ev) {
    const tier = lane.tiers.get(ev.tier);
    if (tier) tiles.draw(tier, ev, lane.current?.doc, lane.el.dataset.run);
  }

  /** A step's line: when it ran, and who runs and waits after it. */
  function stepLine(ev) {
    const seqs = (list) => (list.length > 6 ? `${list.slice(0, 6).join(", ")} and ${list.length - 6} more` : list.join(", "));
    const parts = [`Step ${ev.step} at ${format.ms(ev.t_ms)} ms (${format.ms(ev.dt_ms)} ms)`];
    parts.push(ev.running_seqs.length ? `running req ${seqs(ev.running_seqs)}` : "none running");
    parts.push(ev.waiting_seqs.length ? `waiting req ${seqs(ev.waiting_seqs)}` : "none waiting");
    if (ev.finished.length) parts.push(`finished req ${seqs(ev.finished)}`);
    if (ev.preempted.length) parts.push(`preempted req ${seqs(ev.preempted)}`);
    return parts.join(" · ");
  }

  function showTotals(lane) {
    for (const key of ["gpu", "offload", "computed"]) if (lane.totals[key]) lane.totals[key].textContent = format.count(lane.sums[key]);
    lane.totals.ttft.textContent = `${format.count(lane.sums.ttft)} ms`;
  }

  function handle(ev) {
    const lane = lanes.get(ev.run);
    if (!lane) return;
    const tier = lane.tiers.get(ev.tier);
    switch (ev.type) {
      case "request":
        // The totals count this pass only: pass 2's zero GPU hits must not hide behind pass 1's.
        if (lane.current?.pass !== ev.pass) {
          lane.sums = { gpu: 0, offload: 0, computed: 0, ttft: 0 };
          if (lane.pass) lane.pass.textContent = `pass ${ev.pass}`;
          showTotals(lane);
        }
        lane.current = { seq: ev.seq, doc: ev.doc, pass: ev.pass };
        touch(lane.tiers.get("gpu"), ev.doc);
        lane.now.textContent = `Request ${ev.seq} · pass ${ev.pass} · ${docName(ev.doc)}`;
        break;
      case "lookup":
        if (ev.hit_tokens > 0) flash(tier?.tiles.get(lane.current?.doc), "hit");
        break;
      case "evict":
        flash(tier?.tiles.get(ev.doc), "evicted");
        ghost(lane, tier, ev);
        break;
      case "load":
        touch(tier, ev.doc);
        flash(tier?.tiles.get(ev.doc), "read");
        break;
      case "store":
        if (ev.tier !== "gpu") touch(tier, ev.doc);
        break;
      case "occupancy":
        occupancy(lane, ev);
        relateSoon(lane);
        break;
      case "step":
        if (lane.steps) lane.steps.textContent = stepLine(ev);
        break;
      case "ttft": {
        const offload = ev.cpu_hit_tokens + ev.disk_hit_tokens;
        lane.sums.gpu += ev.gpu_hit_tokens;
        lane.sums.offload += offload;
        lane.sums.computed += ev.computed_tokens;
        lane.sums.ttft += ev.ttft_ms;
        showTotals(lane);
        const parts = [];
        parts.push(ev.gpu_hit_tokens ? `GPU hit ${format.count(ev.gpu_hit_tokens)}` : "GPU miss");
        // One part per offload tier that served the request, in lookup order, named as its bar is.
        for (const [name, tokens] of Object.entries(ev.tier_hits ?? {})) {
          parts.push(`${lane.tiers.get(name)?.label ?? name} load ${format.count(tokens)}`);
        }
        parts.push(`computed ${format.count(ev.computed_tokens)}`);
        lane.now.textContent = `Request ${ev.seq} · pass ${ev.pass} · ${docName(ev.doc)}: ${parts.join(", ")} → ${format.ms(ev.ttft_ms)} ms`;
        lane.now.dataset.source = ev.source;
        break;
      }
    }
  }

  document.addEventListener("kvscope:reset", reset);
  document.addEventListener("kvscope:event", (e) => handle(e.detail.event));
})();
