// Trace replay panel: posts #replay-form to /api/replay (multipart, so an uploaded trace comes along) and draws
// the answer of `kvscope replay --json`: the per-tier table, the hit ratio of each tier per time window, and every
// request's TTFT. A 422 is shown beside the field it names. Events are delegated from the document because the
// panel is swapped in after the page loads.
(() => {
  "use strict";

  // The page's palette (static/js/palette.js): a tier's hits take its source's colour and marker, and a dash per
  // series, so that no series is told apart by colour alone.
  const { palette, plot } = window.kvscope;
  const TIER_STYLE = {
    gpu: { color: palette.source("gpu").colour, symbol: palette.source("gpu").symbol, dash: "solid", label: "GPU" },
    cpu: { color: palette.source("cpu").colour, symbol: palette.source("cpu").symbol, dash: "dash", label: "CPU" },
  };
  const SOURCE_STYLE = ["gpu", "cpu", "computed"].map((name) => {
    const s = palette.source(name);
    return [name, s.colour, s.symbol, `mostly ${name === "gpu" ? "a GPU hit" : s.label}`];
  });
  const OPTIONAL = ["cpu_blocks", "block_size"]; // an empty optional field means "none" (or the trace's), so it is not sent

  function el(id) { return document.getElementById(id); }

  function fmt(n) { return Number(n).toLocaleString("en-US"); }

  function percent(ratio) { return `${(100 * ratio).toFixed(1)}%`; }

  function clearErrors(form) {
    for (const field of form.querySelectorAll(".field")) {
      field.classList.remove("invalid");
      const input = field.querySelector("input, select");
      if (input) {
        input.removeAttribute("aria-invalid");
        input.setAttribute("aria-describedby", `${input.id}-hint`);
      }
      field.querySelector(".field-error")?.remove();
    }
    const box = el("replay-errors");
    box.hidden = true;
    box.replaceChildren();
  }

  function showErrors(form, detail) {
    const general = [];
    for (const err of detail) {
      const name = Array.isArray(err.loc) ? err.loc[err.loc.length - 1] : "";
      const field = form.querySelector(`.field[data-field="${name}"]`);
      if (!field) { general.push(err.msg); continue; }
      const input = field.querySelector("input, select");
      const p = document.createElement("p");
      p.className = "field-error";
      p.id = `${input.id}-error`;
      p.textContent = err.msg;
      field.classList.add("invalid");
      field.append(p);
      input.setAttribute("aria-invalid", "true");
      input.setAttribute("aria-describedby", `${input.id}-hint ${p.id}`);
    }
    if (general.length) {
      const box = el("replay-errors");
      box.replaceChildren(...general.map((m) => Object.assign(document.createElement("p"), { textContent: m })));
      box.hidden = false;
    }
    form.querySelector('[aria-invalid="true"]')?.focus();
  }

  function body(form) {
    const data = new FormData(form);
    for (const name of OPTIONAL) if (data.get(name) === "") data.delete(name);
    const file = data.get("file");
    if (!file || !file.name) data.delete("file");
    return data;
  }

  function tierTable(tiers) {
    const rows = tiers.map((t) => {
      const tr = document.createElement("tr");
      for (const [value, numeric] of [[TIER_STYLE[t.name]?.label ?? t.name, false], [fmt(t.capacity_blocks), true],
        [fmt(t.lookup_blocks), true], [fmt(t.hit_blocks), true], [percent(t.hit_ratio), true]]) {
        const td = document.createElement("td");
        td.textContent = value;
        if (numeric) td.className = "num";
        tr.append(td);
      }
      tr.dataset.tier = t.name;
      return tr;
    });
    el("replay-tiers").querySelector("tbody").replaceChildren(...rows);
  }

  function hitChart(result) {
    const names = result.tiers.map((t) => t.name);
    const x = result.timeline.map((w) => (w.start_ms + w.end_ms) / 2 / 1000);
    const traces = names.map((name, i) => {
      const style = TIER_STYLE[name];
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
    const traces = SOURCE_STYLE.map(([source, color, symbol, label]) => {
      const mine = result.requests.filter((r) => r.source === source);
      return {
        type: "scatter", mode: "markers", name: label, meta: source,
        x: mine.map((r) => r.timestamp_ms / 1000), y: mine.map((r) => r.ttft_ms),
        customdata: mine.map((r) => [r.seq, r.prompt_tokens, r.gpu_hit_tokens, r.cpu_hit_tokens, r.computed_tokens]),
        marker: { color, symbol, size: 6, opacity: 0.75 },
        hovertemplate: "request %{customdata[0]} · %{customdata[1]:,} tokens<br>%{y:.1f} ms · GPU %{customdata[2]:,}"
          + " · CPU %{customdata[3]:,} · computed %{customdata[4]:,}<extra></extra>",
      };
    });
    const div = el("replay-ttft-chart");
    const layout = plot.layout(div, {
      title: { text: "Time to first token, per request", font: { size: 14 } }, height: 360, margin: { t: 72 },
      xaxis: { title: { text: "arrival, s" } },
      yaxis: { title: { text: "TTFT, ms (log)" }, type: "log", dtick: 1 },
    });
    plot.draw(div, traces, layout);
  }

  async function submit(form) {
    const status = el("replay-status");
    const result = el("replay-result");
    const forms = window.kvscope.forms; // the page's one busy and stale mechanism (static/js/forms.js)
    let failure = null;
    clearErrors(form);
    forms.start(form, result.hidden ? null : result);
    status.textContent = "Replaying…";
    try {
      const response = await fetch(form.action, { method: "POST", body: body(form) });
      const answer = await response.json();
      if (response.status === 422) {
        showErrors(form, answer.detail);
        status.textContent = "The trace cannot be replayed with these settings.";
        failure = "these settings were refused (see the fields)";
        return;
      }
      if (!response.ok) throw new Error(`the server answered ${response.status}`);
      el("replay-result").hidden = false;
      tierTable(answer.tiers);
      hitChart(answer);
      ttftChart(answer);
      const t = answer.trace;
      status.textContent = `Replayed ${fmt(t.requests)} requests (${fmt(t.block_references)} block references) of ${t.name} through ${answer.run}.`;
      el("replay").dataset.state = "done";
    } catch (err) {
      status.textContent = `Replay failed: ${err.message}`;
      failure = `the replay failed (${err.message})`;
    } finally {
      forms.finish(form, result.hidden ? null : result, failure);
    }
  }

  document.addEventListener("submit", (e) => {
    if (e.target.id !== "replay-form") return;
    e.preventDefault();
    submit(e.target);
  });
})();
