// The views (app/web/views.py): the nav's links are boosted by htmx, which swaps the body and pushes the URL; back and
// forward ask the server for the view again (htmx's history restore). This script does what htmx leaves to the page:
//   - after Run, the lanes are brought into view when they are out of it (on a phone the scenario form is above them);
//   - a table's scrolling box wider than its content's room is marked data-scrolls, so that it says it scrolls sideways;
//   - in Plan, which shows the sidebar for its scenario but no run, Enter in a field does not post a Run to nowhere;
//   - once a Run's stream says which run keeps it (X-Kvscope-Run), Simulate's URL becomes that run's (/?run=N), so
//     leaving Simulate and coming back (back, or the link) replays it from the runs database instead of losing it.
(() => {
  "use strict";

  // The SSE extension takes the stream's answer before htmx:before:response is sent, so the request's context is
  // kept when it is sent and read once the stream is connected (htmx sets its response before either).
  const streams = new WeakMap();
  document.addEventListener("htmx:before:request", (evt) => {
    const source = evt.detail?.ctx?.sourceElement ?? evt.target;
    if (source?.id === "run-stream" && !source.hasAttribute("hx-get")) streams.set(source, evt.detail.ctx); // a new run's
  });
  document.addEventListener("htmx:sse:after:connection", (evt) => {
    const kept = streams.get(evt.target)?.response?.headers?.get("X-Kvscope-Run") ?? "";
    if (/^[0-9]+$/.test(kept) && location.pathname === "/") history.replaceState(history.state, "", `/?run=${kept}`);
  });

  document.addEventListener("htmx:after:swap", (evt) => {
    // htmx 4 fires after:swap on the form; the answer went to the request's target (a refused Run's to the fields).
    const ctx = evt.detail?.ctx;
    const target = typeof ctx?.target === "string" ? document.querySelector(ctx.target) : ctx?.target;
    if (ctx?.sourceElement?.id !== "scenario-form" || target?.id !== "run") return;
    const lanes = document.querySelector("#run .panel-lanes");
    if (!lanes) return;
    const box = lanes.getBoundingClientRect();
    if (box.top < 0 || box.top > window.innerHeight * 0.5) lanes.scrollIntoView({ block: "start" });
  });

  document.addEventListener("submit", (evt) => {
    if (evt.target?.id === "scenario-form" && !document.getElementById("run")) {
      evt.preventDefault();
      evt.stopPropagation(); // before htmx's listener on the form (this one is the document's, capturing)
    }
  }, true);

  function markScrolling() {
    for (const box of document.querySelectorAll(".table-wrap")) {
      box.toggleAttribute("data-scrolls", box.scrollWidth > box.clientWidth + 1);
    }
  }
  // Rows appear as passes complete and areas load by themselves: measured again after each, and when the window turns.
  for (const name of ["DOMContentLoaded", "htmx:after:settle", "kvscope:finished", "kvscope:step"]) {
    document.addEventListener(name, () => requestAnimationFrame(markScrolling));
  }
  window.addEventListener("resize", markScrolling);
})();
