// The palette for scripts: the colours of static/css/palette.css (read from its CSS variables, so they are
// defined once) and the words each one stands for. Every chart takes run and source colours from here.
(() => {
  "use strict";

  // Read once per name: the variables do not change while the page is open, and a chart asks per point.
  const read = new Map();
  const css = (name) => {
    if (read.has(name)) return read.get(name);
    const value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    if (value) read.set(name, value); // not before the stylesheet has loaded
    return value;
  };
  // Where a prompt's tokens came from, as the stream's `source` says it; "L1/L2" as LMCache users say it.
  const SOURCES = {
    gpu: { label: "GPU hit", tooltip: "GPU hit (vLLM prefix cache)", symbol: "diamond" },
    cpu: { label: "loaded from CPU", tooltip: "loaded from CPU (LMCache L1, local CPU)", symbol: "square" },
    disk: { label: "loaded from disk", tooltip: "loaded from disk (LMCache L2, local disk)", symbol: "triangle-up" },
    computed: { label: "computed", tooltip: "computed (prefill)", symbol: "circle" },
  };
  const RUNS = 4; // --run-0 .. --run-3
  // A series that is no configuration, tier, source or cause (a pass, a candidate, a marked capacity) has no hue of
  // its own: the palette has none to spare. The i-th is told from the others by its dash and marker, in one ink.
  const DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"];
  const SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down"];

  /** The --run-N index for a run named `name`, the i-th of its list: a configuration's name ("gpu", "gpu+cpu", ...)
   *  has its configuration's colour wherever it is listed (a live target named so too), by how many tiers it has;
   *  any other name (a live target's own) takes the i-th. */
  const configIndex = (name) => Math.min(String(name).split("+").length - 1, RUNS - 1);
  const runIndex = (name, i) => (/^gpu(\+[a-z]+)*$/.test(String(name)) ? configIndex(name) : i % RUNS);

  const palette = {
    /** The colour of the i-th configuration of a run (gpu, gpu+cpu, ...), the same on every chart and badge. */
    run: (i) => css(`--run-${i % RUNS}`),
    /** The colour of a configuration named as sim/workloads/scenario.py's run_names name them ("gpu", "gpu+cpu",
     *  "gpu+cpu+disk"): by how many tiers it has, so that "gpu" is the same colour wherever it is listed first or not. */
    config: (name) => css(`--run-${configIndex(name)}`),
    runIndex,
    /** The colour, label and marker of a source (gpu, cpu, disk, computed). */
    // A source not listed is a further tier behind the CPU: drawn as the disk is, named by its tier.
    source: (name) => SOURCES[name]
      ? { colour: css(`--source-${name}`), ...SOURCES[name] }
      : { colour: css("--source-disk"), label: `loaded from ${name}`, tooltip: `loaded from ${name}`, symbol: SOURCES.disk.symbol },
    sources: Object.keys(SOURCES),
    measured: () => css("--measured"),
    /** The colour, dash and marker of the i-th series of a chart whose series are not configurations, tiers, sources
     *  or causes (passes, the advisor's front and candidates): the one series ink, a dash and a marker of its own. */
    series: (i) => ({ colour: css("--series-ink"), dash: DASHES[i % DASHES.length], symbol: SYMBOLS[i % SYMBOLS.length] }),
    /** The colour of a marked line that is no series (a capacity mark, a target): a rule, told apart by its dash. */
    seriesRule: () => css("--series-rule"),
    dashes: DASHES,
    /** The colour of a cause of computed tokens (sim/explain/causes.py's names). */
    cause: (name) => css(`--cause-${name}`) || css("--chart-ink-soft"),
    ink: () => css("--chart-ink"),
    inkSoft: () => css("--chart-ink-soft"),
    plotBackground: () => css("--chart-paper"),
    grid: () => css("--chart-grid"),
    rule: () => css("--chart-rule"),
    key: () => css("--chart-key"),
    labelBackground: () => css("--chart-label-back"),
  };

  window.kvscope = { ...window.kvscope, palette };
})();
