// Tier display names for scripts: the server's one definition (sim.engine.events.TIER_LABELS), carried by the body's
// data-tier-labels, so a script never spells "GPU", "CPU" or "Disk" itself. A tier not listed (a storage tier
// behind the CPU) is called by its own name.
(() => {
  "use strict";

  let labels = null;
  /** A tier's display name, as the tables and the CLI give it. */
  const tierLabel = (name) => {
    labels ??= JSON.parse(document.body.dataset.tierLabels || "{}");
    return labels[name] ?? name;
  };

  window.kvscope = { ...window.kvscope, tierLabel };
})();
