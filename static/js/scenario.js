// The sidebar form: "More settings" stays open once the reader has opened it, when its fields are swapped (a preset
// chosen) or morphed (after a run); the server renders it open by itself when one of its fields has an error.
(() => {
  "use strict";

  let open = false;
  document.addEventListener("htmx:before:swap", () => {
    open = Boolean(document.getElementById("more-settings")?.open);
  });
  document.addEventListener("htmx:after:swap", () => {
    const more = document.getElementById("more-settings");
    if (more && open) more.open = true;
  });
})();
