// The sidebar form: "More settings" stays open once the reader has opened it, when its fields are swapped (a preset
// chosen) or morphed (after a run); the server renders it open by itself when one of its fields has an error.
// Every panel that simulates the sidebar's scenario names it ([data-role=sidebar-scenario], kept up to date here);
// when its costs change ("Use these costs", a profile, reset) the run shown is marked stale until Run is pressed; when
// they change in Plan, which shows no run, Simulate's run is marked so when the nav brings it back.
(() => {
  "use strict";

  let open = false;
  let staleWhenShown = null; // why Simulate's run is stale when it is next shown: the costs changed in another view
  document.addEventListener("htmx:before:swap", () => {
    open = Boolean(document.getElementById("more-settings")?.open);
  });
  document.addEventListener("htmx:after:swap", (evt) => {
    const more = document.getElementById("more-settings");
    if (more && open) more.open = true;
    describe();
    if (evt.target?.id === "scenario-costs" || evt.detail?.ctx?.target?.id === "scenario-costs") costsChanged();
    const run = document.getElementById("run");
    if (staleWhenShown && run && evt.detail?.ctx?.target === document.body) { // a view swapped in by the nav
      window.kvscope?.forms?.stale(run, staleWhenShown);
      staleWhenShown = null;
    }
  });

  const value = (name) => document.querySelector(`#scenario-form [name="${name}"]`)?.value?.trim() ?? "";
  // Whole numbers as the page writes them elsewhere (5,011); anything else as typed.
  const count = (name) => (/^\d+$/.test(value(name)) ? window.kvscope.format.count(Number(value(name))) : value(name));

  /** The sidebar's scenario in a few words: preset, documents, tokens, tiers, passes and costs. */
  function describe() {
    const targets = document.querySelectorAll("[data-role=sidebar-scenario]");
    if (!targets.length || !document.getElementById("scenario-form")) return;
    const cpu = value("cpu_gb");
    const costs = document.querySelector("#scenario-costs [data-role=costs-label]")?.textContent.trim() ?? "the server's";
    const words = [
      value("preset"),
      `${count("docs") || "?"} documents of ${count("doc_tokens") || "?"} tokens`,
      `GPU ${count("gpu_tokens") || "?"} tokens`,
      cpu ? `CPU ${cpu} GiB` : "no CPU tier",
      `passes ${value("passes") || "?"}`,
      `costs: ${costs}`,
    ].join(" · ");
    for (const el of targets) el.textContent = words;
  }

  function costsChanged() {
    const run = document.getElementById("run");
    const custom = document.getElementById("scenario-costs")?.dataset.state === "custom";
    const why = custom ? "the sidebar's costs changed: press Run to simulate with them" : "the costs were reset: press Run to simulate with the server's";
    if (run) window.kvscope?.forms?.stale(run, why);
    else staleWhenShown = why;
    const status = document.getElementById("calibrate-use-status");
    if (status && custom) {
      status.setAttribute("role", "status");
      status.textContent = "In the sidebar's Costs line now. Press Run to simulate with them; the curves, the what-ifs and "
        + "the measurements' predictions use them from their next request.";
    }
  }

  document.addEventListener("input", (evt) => { if (evt.target.closest?.("#scenario-form")) describe(); });
  document.addEventListener("change", (evt) => { if (evt.target.closest?.("#scenario-form")) describe(); });
  document.addEventListener("DOMContentLoaded", describe);
})();
