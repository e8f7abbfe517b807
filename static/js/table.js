// The seed-style table: each row is revealed when the stream's `pass` event for that configuration and pass is
// applied, so the table fills in as the run plays. A kept run's rows arrive rendered by the server; a run being
// streamed (rows with data-pending) gets its numbers from the stream itself: the pass summary (p50, mean, p90, hit
// and computed tokens), the p99 of the pass's `ttft` events, and the speed-up over the first configuration, so the
// run is simulated once, by its stream.
(() => {
  "use strict";

  const { ms, count, times } = window.kvscope.format;
  const fmt = { ms, tokens: count, times };
  let ttfts = new Map(); // "run|pass" -> [ttft_ms] of the requests applied so far
  let summaries = new Map(); // "run|pass" -> the pass summary

  // Linear-interpolated quantile, as sim/numeric/stats.py computes it.
  function quantile(values, q) {
    const sorted = [...values].sort((a, b) => a - b);
    const pos = (sorted.length - 1) * q;
    const lo = Math.floor(pos);
    const hi = Math.min(lo + 1, sorted.length - 1);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
  }

  function reset() {
    ttfts = new Map();
    summaries = new Map();
    const table = document.getElementById("results-table");
    if (!table) return;
    for (const row of table.tBodies[0].rows) row.hidden = true;
    const empty = document.querySelector(".panel-table [data-role=empty]");
    if (empty) empty.hidden = false;
  }

  function set(row, col, text) {
    const cell = row.querySelector(`[data-col="${col}"]`);
    if (cell) cell.textContent = text;
  }

  function share(tokens, prompt, bytesPerToken) {
    const rate = prompt ? (100 * tokens) / prompt : 0;
    return `${rate.toFixed(1)}% · ${((tokens * bytesPerToken) / 2 ** 30).toFixed(3)}\u00a0GiB`; // the GiB stays with its number
  }

  function fill(row, run, s) {
    const table = document.getElementById("results-table");
    const bytes = Number(table.dataset.bytesPerToken);
    const hits = s.tier_hits ?? {};
    const prompt = s.gpu_hit_tokens + s.computed_tokens + Object.values(hits).reduce((a, b) => a + b, 0);
    set(row, "p50", fmt.ms(s.p50_ms));
    set(row, "mean", fmt.ms(s.mean_ms));
    set(row, "p90", fmt.ms(s.p90_ms));
    const mine = ttfts.get(`${run}|${s.pass}`) ?? [];
    set(row, "p99", mine.length ? fmt.ms(quantile(mine, 0.99)) : "–");
    set(row, "gpu-hit", fmt.tokens(s.gpu_hit_tokens));
    set(row, "gpu-hit-share", share(s.gpu_hit_tokens, prompt, bytes));
    for (const cell of row.querySelectorAll("[data-tier]")) {
      const tokens = hits[cell.dataset.tier] ?? 0;
      cell.textContent = fmt.tokens(tokens);
      set(row, `${cell.dataset.tier}-hit-share`, share(tokens, prompt, bytes));
    }
    set(row, "computed", fmt.tokens(s.computed_tokens));
    // Under load, with more than one output token (the stepped engine's pass summary, sim/sched/stream.py).
    set(row, "tpot", fmt.ms(s.tpot_ms));
    set(row, "throughput", fmt.ms(s.output_tokens_per_s));
  }

  // The speed-up over the first configuration in the same pass, once both passes are known.
  function speedups(number) {
    const table = document.getElementById("results-table");
    const base = summaries.get(`${table.dataset.baseline}|${number}`);
    if (!base) return;
    for (const row of table.querySelectorAll(`tr[data-pending][data-pass="${number}"]`)) {
      const s = summaries.get(`${row.dataset.run}|${number}`);
      if (!s || row.dataset.run === table.dataset.baseline) continue;
      const ratio = (b, c) => (c > 0 ? b / c : Infinity); // exact, as sim/result.py's comparison: rounded once, written
      const cell = row.querySelector('[data-col="speedup"]');
      if (!cell) continue;
      cell.replaceChildren();
      const strong = document.createElement("strong");
      strong.textContent = fmt.times(ratio(base.p50_ms, s.p50_ms));
      cell.append(strong, ` / ${fmt.times(ratio(base.mean_ms, s.mean_ms))}`);
    }
  }

  function reveal(ev) {
    const row = document.querySelector(`#results-table tr[data-run="${CSS.escape(ev.run)}"][data-pass="${ev.summary.pass}"]`);
    if (!row) return;
    if (row.hasAttribute("data-pending")) {
      summaries.set(`${ev.run}|${ev.summary.pass}`, ev.summary);
      fill(row, ev.run, ev.summary);
      speedups(ev.summary.pass);
    }
    row.hidden = false;
    const empty = document.querySelector(".panel-table [data-role=empty]");
    if (empty) empty.hidden = true;
  }

  function ttft(ev) {
    const key = `${ev.run}|${ev.pass}`;
    if (!ttfts.has(key)) ttfts.set(key, []);
    ttfts.get(key).push(ev.ttft_ms);
  }

  document.addEventListener("kvscope:reset", reset);
  document.addEventListener("kvscope:event", (e) => {
    const ev = e.detail.event;
    if (ev.type === "pass") reveal(ev);
    else if (ev.type === "ttft") ttft(ev);
  });
})();
