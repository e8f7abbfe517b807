// A playback bar's controls (templates/partials/playback.html), one behaviour for every view that plays: Simulate's
// player (player.js) and the Fleet view's (fleetplay.js) each read and set only their own bar's.
//   kvscope.playback.speed(bar)          its Speed: steps a second, Infinity for "fastest"
//   kvscope.playback.buttons(bar, mode)  Play off while playing, Pause on only then, Step off once done or failed
//   kvscope.playback.action(evt, bar)    the action ("play", "pause", "step") of a click on one of bar's buttons, or null
(() => {
  "use strict";

  function speed(bar) {
    const value = bar?.querySelector("[data-role=speed]")?.value ?? "2";
    return value === "max" ? Infinity : Number(value);
  }

  function buttons(bar, mode) {
    const button = (action) => bar?.querySelector(`[data-action=${action}]`);
    if (button("play")) button("play").disabled = mode === "playing";
    if (button("pause")) button("pause").disabled = mode !== "playing";
    if (button("step")) button("step").disabled = mode === "done" || mode === "error";
  }

  function action(evt, bar) {
    const button = evt.target.closest?.("[data-action]");
    return button && bar?.contains(button) ? button.dataset.action : null;
  }

  window.kvscope = { ...window.kvscope, playback: { speed, buttons, action } };
})();
