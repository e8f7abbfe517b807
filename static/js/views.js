// The views (app/web/views.py): the nav's links are boosted by htmx, which swaps the body and pushes the URL; back and
// forward ask the server for the view again (htmx's history restore). This script does the two things htmx leaves:
//   - the page's first history entry is marked as htmx's, so going back to it restores that view too (htmx restores
//     only entries it pushed, and the first was loaded by the browser);
//   - after Run, the lanes are brought into view when they are out of it (on a phone the scenario form is above them).
(() => {
  "use strict";

  if (!history.state?.htmx) history.replaceState({ ...history.state, htmx: true }, "", location.href);

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
})();
