// A tier's capacity bar as tiles, one per cached document, to scale: the Simulate view's lanes (lanes.js) and the
// Fleet view's replicas (fleet.js) draw their bars with it. `draw` takes what the tier holds now (an `occupancy`
// event's fields: docs, pinned, used_tokens, capacity_tokens); tiles new to the bar grow in at its right end,
// documents gone shrink out, and the part of a tile that running requests hold is drawn pinned.
//   kvscope.tiles.state(el)                 the bar of .tier element el, emptied: its state for draw
//   kvscope.tiles.draw(tier, ev, current, owner)  the bar as ev says; current: the document asked for (outlined);
//                                           owner: whose tier it is, for the bar's words ("gpu+cpu", "replica 1")
//   kvscope.tiles.docClass(doc), docName(doc)     a document's colour classes and its name (-1: the shared prefix)
(() => {
  "use strict";

  const { format } = window.kvscope;

  function state(el) {
    const bar = el.querySelector("[data-role=bar]");
    const capacity = Number(el.dataset.capacityTokens);
    const prompt = Number(el.dataset.promptTokens);
    // Faint gridlines one prompt apart: how many documents the tier holds, at a glance.
    if (prompt) bar.style.setProperty("--prompt-share", `${Math.min(100, (100 * prompt) / capacity)}%`);
    bar.replaceChildren();
    return {
      el, bar, capacity, name: el.dataset.tier,
      label: el.querySelector(".tier-name")?.textContent ?? el.dataset.tier,
      used: el.querySelector("[data-role=used]"),
      pinned: el.querySelector("[data-role=pinned]"), // under load: tokens running requests hold
      tiles: new Map(), // doc -> tile element
      order: [], // docs, least recently used first
      tokens: new Map(), // doc -> cached tokens
    };
  }

  function docClass(doc) {
    if (doc < 0) return "doc-shared";
    return `doc-${doc % 10}` + (Math.floor(doc / 10) % 2 ? " doc-alt" : "");
  }

  function docName(doc) {
    return doc < 0 ? "shared prefix" : `doc ${doc}`;
  }

  function newTile(doc) {
    const tile = document.createElement("div");
    tile.className = `tile ${docClass(doc)} entering`;
    tile.dataset.doc = String(doc);
    tile.textContent = doc < 0 ? "S" : String(doc);
    tile.style.width = "0%";
    tile.addEventListener("animationend", (e) => tile.classList.remove(e.animationName.replace(/^tile-/, "")));
    return tile;
  }

  function draw(tier, ev, current, owner) {
    const now = new Map(Object.entries(ev.docs).map(([d, t]) => [Number(d), t]));
    const pinned = ev.pinned ? new Map(Object.entries(ev.pinned).map(([d, t]) => [Number(d), t])) : null;
    // Documents new to this bar (in recency terms) go to the right end, in document order.
    for (const doc of [...now.keys()].sort((a, b) => a - b)) if (!tier.order.includes(doc)) tier.order.push(doc);
    tier.order = tier.order.filter((doc) => now.has(doc));
    for (const [doc, tile] of tier.tiles) {
      if (now.has(doc)) continue;
      tier.tiles.delete(doc);
      tile.classList.add("leaving");
      tile.style.width = "0%";
      setTimeout(() => tile.remove(), 450);
    }
    const pending = [];
    for (const doc of tier.order) {
      let tile = tier.tiles.get(doc);
      if (!tile) {
        tile = newTile(doc);
        tier.tiles.set(doc, tile);
        pending.push(tile);
      }
      const tokens = now.get(doc);
      const share = (100 * tokens) / tier.capacity;
      tile.dataset.tokens = String(tokens);
      tile.dataset.share = share.toFixed(2);
      const held = pinned?.get(doc) ?? 0;
      tile.title = `${docName(doc)}: ${format.count(tokens)} tokens in ${tier.label}`
        + (held ? `, ${format.count(held)} of them pinned by running requests` : "");
      pin(tile, held, tokens);
      tile.classList.toggle("narrow", share < 2.5);
      tile.classList.toggle("current", current === doc);
      tier.bar.appendChild(tile); // moves it into recency order; leaving tiles drift left of it
      if (!pending.includes(tile)) tile.style.width = `${share}%`;
    }
    // Let new tiles be laid out at 0 first so that their width animates in.
    requestAnimationFrame(() => pending.forEach((tile) => { tile.style.width = `${tile.dataset.share}%`; }));
    tier.tokens = now;
    tier.used.textContent = format.count(ev.used_tokens);
    const held = pinned ? [...pinned.values()].reduce((a, b) => a + b, 0) : 0;
    if (tier.pinned) tier.pinned.textContent = format.count(held);
    const pct = Math.round((100 * ev.used_tokens) / ev.capacity_tokens);
    const docs = tier.order.map((d) => `${docName(d)} ${format.count(now.get(d))}`
      + (pinned?.get(d) ? ` (${format.count(pinned.get(d))} pinned)` : "")).join(", ");
    tier.bar.setAttribute("aria-label", `${tier.label} tier of ${owner}: ${pct}% full${docs ? `: ${docs}` : ""}`);
  }

  /** The pinned part of a tile: the share of its tokens running requests hold, at its right (their newest blocks). */
  function pin(tile, held, tokens) {
    let part = tile.querySelector(".pinned-part");
    if (!held) {
      part?.remove();
      tile.classList.remove("has-pinned");
      return;
    }
    if (!part) {
      part = document.createElement("span");
      part.className = "pinned-part";
      part.setAttribute("aria-hidden", "true");
      tile.append(part);
    }
    tile.classList.add("has-pinned");
    tile.dataset.pinned = String(held);
    part.style.width = `${Math.min(100, (100 * held) / tokens)}%`;
  }

  window.kvscope = { ...window.kvscope, tiles: { state, draw, docClass, docName } };
})();
