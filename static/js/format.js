// Numbers as the page writes them, in every panel and as the server's template filters do (app/web/context.py:
// tokens, ms, times): en-US grouping whatever the browser's locale, milliseconds to one decimal, a dash for a value
// not known.
(() => {
  "use strict";

  const EN = "en-US";
  const known = (v) => v !== null && v !== undefined && Number.isFinite(Number(v));
  // `digits` decimals; a tie to the even digit, as Python's format() rounds (581.25 -> 581.2, not toFixed's 581.3).
  // One Intl.NumberFormat per style, made once: toLocaleString(EN, options) builds a new one on every call (what it is
  // specified as), a tenth of a millisecond each, paid for every number of every event at full speed.
  const formats = new Map();
  const fixed = (v, digits, useGrouping = true) => {
    const key = `${digits}/${useGrouping}`;
    if (!formats.has(key)) {
      formats.set(key, new Intl.NumberFormat(EN, {
        minimumFractionDigits: digits, maximumFractionDigits: digits, roundingMode: "halfEven", useGrouping,
      }));
    }
    // From the number's exact binary value (toFixed(100) spells it out), as Python's format() rounds: given the
    // Number, Intl rounds its shortest decimal instead, so 39.45 (39.4500000000000028...) read 39.4 here, 39.5 there.
    return formats.get(key).format(Number(v).toFixed(100));
  };

  const format = {
    /** A whole number (tokens, requests, events): 50240 -> "50,240". */
    count: (v) => (known(v) ? fixed(v, 0) : "–"),
    /** Milliseconds: 1234.56 -> "1,234.6". */
    ms: (v) => (known(v) ? fixed(v, 1) : "–"),
    /** A speed-up: 11.747 -> "11.7x"; below 2, two decimals show a few percent (0.966 -> "0.97x"). */
    times: (v) => (known(v) ? `${fixed(v, v < 2 ? 2 : 1, false)}x` : "–"),
    /** A number as it is, grouped (a target the reader typed): 1500 -> "1,500", 0.25 -> "0.25". */
    number: (v) => (known(v) ? Number(v).toLocaleString(EN, { maximumFractionDigits: 6 }) : "–"),
  };

  window.kvscope = { ...window.kvscope, format };
})();
