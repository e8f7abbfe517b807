// The Fleet view's player: plays a fleet's answer (fleet/strips.html's data-fleet-play: per router, each request's
// route in arrival order and the holdings' frames of sim.fleet.holdings) one arrival at a time. Its bar
// (fleet/playback.html) is Simulate's Step, Play, Pause and Speed (static/js/playback.js), and a position: 0 is before
// the first arrival, k is request k - 1 arriving, the last is every request served. At each position the shown
// router's lanes draw what each replica's tiers hold then (every frame up to it applied, static/js/tiles.js), the
// replica the arriving request is routed to is outlined with its document's tile, and the strips show the marks of
// the requests arrived so far. Serve starts it playing, as Run does in Simulate.
(() => {
  "use strict";

  const { format, tiles, playback } = window.kvscope;
  const s = { data: null, stack: null, requests: [], frames: [], cut: [], position: 0, mode: "idle", timer: null,
    held: new Map(), applied: 0, bars: new Map() };

  const $ = (selector, root = document) => root.querySelector(selector);
  const bar = () => $("#fleet-playback");
  const last = () => s.requests.length + 1;
  const key = (replica, tier) => `${replica ?? "shared"}/${tier}`;

  /** The shown router's lanes: its bars' states, emptied, and its frames and routes. */
  function bind() {
    const menu = $("[data-role=lanes-router]");
    const router = menu?.value ?? Object.keys(s.data)[0];
    s.stack = $(`.fleet-stack[data-router="${CSS.escape(router)}"]`);
    ({ requests: s.requests, frames: s.frames } = s.data[router]);
    // cut[p]: how many frames make position p's state (frames come in arrival order, the end's last).
    s.cut = [];
    let i = 0;
    for (let p = 0; p <= s.requests.length; p += 1) {
      while (i < s.frames.length && s.frames[i].seq !== null && s.frames[i].seq < p) i += 1;
      s.cut.push(i);
    }
    s.cut.push(s.frames.length);
    s.bars = new Map();
    for (const strip of s.stack?.querySelectorAll(".fleet-strip") ?? []) {
      const replica = strip.dataset.replica === "shared" ? null : Number(strip.dataset.replica);
      for (const el of strip.querySelectorAll(".tier")) s.bars.set(key(replica, el.dataset.tier), { replica, tier: tiles.state(el) });
    }
    s.held = new Map();
    s.applied = 0;
  }

  /** Position p's state: the frames up to it applied (from the start when going back), every bar drawn. */
  function seek(p) {
    s.position = Math.max(0, Math.min(last(), p));
    const upto = s.cut[s.position];
    if (upto < s.applied) {
      s.held = new Map();
      s.applied = 0;
    }
    for (; s.applied < upto; s.applied += 1) {
      const f = s.frames[s.applied];
      const k = key(f.replica, f.tier);
      const now = s.held.get(k) ?? { docs: {}, pinned: {}, used: 0 };
      for (const [doc, tokens] of Object.entries(f.docs)) if (tokens) now.docs[doc] = tokens; else delete now.docs[doc];
      for (const [doc, tokens] of Object.entries(f.pinned ?? {})) if (tokens) now.pinned[doc] = tokens; else delete now.pinned[doc];
      now.used = f.used_tokens;
      s.held.set(k, now);
    }
    draw();
  }

  function draw() {
    const arriving = s.position >= 1 && s.position <= s.requests.length ? s.requests[s.position - 1] : null;
    for (const [k, { replica, tier }] of s.bars) {
      const now = s.held.get(k) ?? { docs: {}, pinned: {}, used: 0 };
      const ev = { docs: now.docs, pinned: now.pinned, used_tokens: now.used, capacity_tokens: tier.capacity };
      const current = arriving && arriving.replica === replica ? arriving.doc : undefined;
      tiles.draw(tier, ev, current, replica === null ? "every replica" : `replica ${replica}`);
    }
    for (const strip of s.stack?.querySelectorAll(".fleet-strip[data-replica]:not([data-replica=shared])") ?? []) {
      const replica = Number(strip.dataset.replica);
      const routed = arriving?.replica === replica;
      const better = Boolean(arriving && !routed && arriving.lost && arriving.best === replica);
      strip.classList.toggle("routed", routed);
      strip.classList.toggle("better", better);
      const now = $("[data-role=now]", strip);
      if (routed) {
        now.textContent = `← Request ${arriving.seq} (${tiles.docName(arriving.doc)}, pass ${arriving.pass}) routed here: `
          + (arriving.held ? `its GPU holds ${format.count(arriving.held)} tokens of it` : "its GPU holds none of it");
      } else if (better) {
        now.textContent = `Its GPU held ${format.count(arriving.best_held)} tokens of request ${arriving.seq}; `
          + `replica ${arriving.replica}, where it went, ${arriving.held ? `${format.count(arriving.held)}` : "none"}`;
      } else {
        const prior = s.requests.slice(0, Math.min(s.position, s.requests.length)).findLast((r) => r.replica === replica);
        now.textContent = prior ? `Last routed here: request ${prior.seq} (${tiles.docName(prior.doc)})` : "No request yet.";
      }
      for (const mark of strip.querySelectorAll(".fleet-mark")) {
        const seq = Number(mark.dataset.seq);
        mark.classList.toggle("ahead", seq >= s.position && s.position <= s.requests.length);
        mark.classList.toggle("current", seq === arriving?.seq);
      }
    }
    render();
  }

  function render() {
    const status = $("#fleet-player-status");
    if (!status) return;
    const n = s.requests.length;
    const r = s.position >= 1 && s.position <= n ? s.requests[s.position - 1] : null;
    const where = r
      ? `Request ${r.seq} (${s.position} of ${n}) · pass ${r.pass} · ${tiles.docName(r.doc)} → replica ${r.replica}` : "";
    const end = `Done: ${n} requests served; each replica's tiers as they were left.${s.mode === "done" ? " Play replays it." : ""}`;
    const text = s.position > n ? end
      : {
        idle: "Press Play to route the requests one by one, or Step for one.",
        playing: `Playing. ${where || `0 of ${n} requests`}.`,
        paused: where ? `Paused. ${where}.` : `Ready: press Step or Play (${n} requests).`,
        done: `Done: ${n} requests routed. Play replays it.`,
      }[s.mode];
    if (status.textContent !== text) { status.textContent = text; status.title = text; } // the title: its whole text where one line cuts it
    status.dataset.state = s.mode;
    status.dataset.position = String(s.position);
    playback.buttons(bar(), s.mode);
    const range = $("[data-role=position]", bar());
    if (range && Number(range.value) !== s.position) range.value = String(s.position);
    const said = r ? `request ${r.seq}, ${s.position} of ${n}` : s.position > n ? "every request served" : "before the first request";
    range?.setAttribute("aria-valuetext", said);
  }

  // -- controls -----------------------------------------------------------------

  function tick() {
    clearTimeout(s.timer);
    s.timer = null;
    // Stopped when the view has gone (a nav link swapped the page's body): no timer draws lanes nobody sees.
    if (!bar()) s.mode = "idle";
    if (s.mode !== "playing") return;
    const speed = playback.speed(bar());
    // As fast as it goes: about a second for the whole run, a frame a move.
    const stride = speed === Infinity ? Math.max(1, Math.ceil(last() / 60)) : 1;
    seek(s.position + stride);
    if (s.position >= last()) {
      s.mode = "done";
      render();
      return;
    }
    s.timer = setTimeout(tick, speed === Infinity ? 16 : 1000 / speed);
  }

  function play() {
    if (!s.data) return;
    if (s.position >= last()) seek(0);
    s.mode = "playing";
    tick();
  }

  function pause() {
    clearTimeout(s.timer);
    if (s.mode === "playing") s.mode = "paused";
    render();
  }

  function step() {
    if (!s.data || s.position >= last()) return;
    pause();
    s.mode = "paused";
    seek(s.position + 1);
    if (s.position >= last()) s.mode = "done";
    render();
  }

  document.addEventListener("click", (evt) => {
    const action = { play, pause, step }[playback.action(evt, bar())];
    if (action) action();
  });

  document.addEventListener("input", (evt) => {
    if (!(evt.target instanceof HTMLInputElement) || evt.target.dataset.role !== "position" || !bar()?.contains(evt.target)) return;
    clearTimeout(s.timer);
    s.mode = "paused";
    seek(Number(evt.target.value));
    if (s.position >= last()) s.mode = "done";
    render();
  });

  document.addEventListener("change", (evt) => {
    if (evt.target.matches?.("#fleet-playback [data-role=speed]") && s.mode === "playing") tick();
    // Another router's lanes shown (fleet.js unhides them): drawn at the same position, the same arrival.
    if (evt.target.matches?.("[data-role=lanes-router]") && s.data) {
      bind();
      seek(s.position);
    }
  });

  // A new answer swapped in: its player from its start, playing.
  document.addEventListener("htmx:after:swap", () => {
    const holder = $("#fleet-result [data-fleet-play]:not([data-bound])");
    if (!holder) return;
    holder.dataset.bound = "true";
    clearTimeout(s.timer);
    s.data = JSON.parse(holder.dataset.fleetPlay);
    s.mode = "idle";
    bind();
    seek(0);
    play();
  });
})();
