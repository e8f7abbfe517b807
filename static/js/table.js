// The seed-style table: its rows are rendered by the server from the same simulation; each is revealed when the
// stream's `pass` event for that configuration and pass is applied, so the table fills in as the run plays.
(() => {
  "use strict";

  function reset() {
    const table = document.getElementById("results-table");
    if (!table) return;
    for (const row of table.tBodies[0].rows) row.hidden = true;
    const empty = document.querySelector(".panel-table [data-role=empty]");
    if (empty) empty.hidden = false;
  }

  function reveal(ev) {
    const row = document.querySelector(`#results-table tr[data-run="${CSS.escape(ev.run)}"][data-pass="${ev.summary.pass}"]`);
    if (!row) return;
    row.hidden = false;
    const empty = document.querySelector(".panel-table [data-role=empty]");
    if (empty) empty.hidden = true;
  }

  document.addEventListener("kvscope:reset", reset);
  document.addEventListener("kvscope:event", (e) => { if (e.detail.event.type === "pass") reveal(e.detail.event); });
})();
