// The player: takes a run's step stream (opened by htmx's SSE extension from #run-stream: a new simulation's, or a
// kept run's stored events, which play exactly as they were sent), groups its events
// by request, and applies one request at a time (Step), at the chosen speed (Play), or not at all (Pause).
//
// Panels never read the stream; they listen on `document` for:
//   kvscope:reset     {runs, requests}   a run's panels appeared, or it is shown again from its start: clear
//   kvscope:event     {event}            one core event (the vocabulary of sim/engine/events.py), in stream order
//   kvscope:step      {seq, applied, total}  every event of one request, in every configuration, is applied
//   kvscope:finished  {}                 the stream has ended and every request is applied
// A step is one request number (`seq`) across all configurations; summaries without a `seq` (pass, done)
// belong to the step their run last reported. When requests overlap (#run-view data-unit="step", the stepped
// engine's stream, sim/sched/stream.py), a step is one scheduler step across all configurations instead: a run's
// events belong to its next step until its `step` event ends it; a run that has ended takes no part in later steps.
(() => {
  "use strict";

  const state = {
    runs: [],
    total: 0,
    unit: "request", // request | step: what one Step applies
    open: new Map(), // run -> the scheduler step its next events belong to (unit "step")
    endedAt: new Map(), // run -> its last scheduler step, once its `done` has come (unit "step")
    firsts: 0, // requests whose first token has been applied (unit "step")
    preamble: [], // events before any request (run)
    steps: [], // {seq, events, ended: Set(run), applied}
    bySeq: new Map(),
    lastSeq: new Map(), // run -> seq of its latest request
    applied: 0,
    streaming: false,
    ended: false,
    failed: null,
    mode: "idle", // idle | playing | paused | done | error
    credit: 0, // steps still to apply while paused (Step)
    timer: null,
    lastAppliedAt: 0,
    startPaused: false,
    view: null, // the #run-view the panels were last reset for
  };

  // Panels' scripts load after this one; a stream started before they have (a page opened from a link) is held
  // until the document is loaded, then shown from its start.
  let loaded = false;

  const $ = (selector) => document.querySelector(selector);
  const emit = (name, detail) => document.dispatchEvent(new CustomEvent(name, { detail }));

  const speed = () => window.kvscope.playback.speed($("#playback"));

  // -- receiving ------------------------------------------------------------

  function viewChanged() {
    const view = $("#run-view");
    if (!view || view === state.view) return;
    state.view = view;
    emit("kvscope:reset", { runs: JSON.parse(view.dataset.runs ?? "[]"), requests: Number(view.dataset.requests ?? 0) });
  }

  function begin(stream) {
    clearTimeout(state.timer);
    const view = $("#run-view");
    Object.assign(state, {
      runs: JSON.parse(view?.dataset.runs ?? "[]"),
      total: Number(view?.dataset.requests ?? 0),
      unit: view?.dataset.unit ?? "request", open: new Map(), endedAt: new Map(), firsts: 0,
      preamble: [], steps: [], bySeq: new Map(), lastSeq: new Map(), applied: 0,
      streaming: true, ended: false, failed: null, timer: null, lastAppliedAt: 0,
      mode: state.startPaused ? "paused" : "playing",
      credit: state.startPaused ? 1 : 0,
    });
    state.startPaused = false;
    state.view = view;
    stream.dataset.player = "attached";
    if (loaded) emit("kvscope:reset", { runs: state.runs, requests: state.total });
    render();
  }

  function stepFor(seq) {
    let step = state.bySeq.get(seq);
    if (!step) {
      step = { seq, events: [], ended: new Set(), applied: false };
      state.bySeq.set(seq, step);
      state.steps.push(step);
    }
    return step;
  }

  function receive(event) {
    if (event.type === "error") {
      state.failed = event.message || "the stream failed";
      emit("kvscope:event", { event });
      return;
    }
    let step = null;
    if (state.unit === "step") {
      if (event.type !== "run") {
        const number = event.type === "step" ? event.step : (state.open.get(event.run) ?? 1);
        step = stepFor(number);
        if (event.type === "step") state.open.set(event.run, event.step + 1);
        if (event.type === "done") state.endedAt.set(event.run, number);
      }
    } else if (event.seq !== undefined) {
      step = stepFor(event.seq);
      state.lastSeq.set(event.run, event.seq);
    } else if (state.lastSeq.has(event.run)) {
      step = state.bySeq.get(state.lastSeq.get(event.run));
    }
    if (!step) {
      state.preamble.push(event);
      if (loaded) emit("kvscope:event", { event });
      return;
    }
    step.events.push(event);
    if (event.type === (state.unit === "step" ? "step" : "ttft")) step.ended.add(event.run);
    if (step.applied) emit("kvscope:event", { event }); // a pass or run summary after its step was shown
    // Applied from a task of its own: the browser may hand over hundreds of stream messages in one task, and a pump
    // per message would apply them all there (one task of half a second at full speed) instead of in 12 ms slices.
    if (!state.timer) state.timer = setTimeout(pump, 0);
  }

  function streamEnded() {
    state.streaming = false;
    state.ended = true;
    pump();
  }

  // -- applying ---------------------------------------------------------------

  // A scheduler step is whole once every run has ended it, or had ended before it (runs take different steps).
  const runsDone = (step) => state.unit === "step"
    ? state.runs.every((run) => step.ended.has(run) || (state.endedAt.get(run) ?? Infinity) < step.seq)
    : step.ended.size >= state.runs.length;
  const ready = (step) => step && !step.applied && (state.ended || runsDone(step));
  const finished = () => state.ended && state.applied >= state.steps.length;

  function apply(step) {
    for (const event of step.events) emit("kvscope:event", { event });
    step.applied = true;
    state.applied += 1;
    state.firsts += step.events.filter((e) => e.type === "ttft" && e.run === state.runs[0]).length;
    state.lastAppliedAt = performance.now();
    emit("kvscope:step", { seq: step.seq, applied: state.applied, total: state.total, events: step.events });
  }

  function pump() {
    if (!loaded) return;
    clearTimeout(state.timer);
    state.timer = null;
    if (state.failed) {
      state.mode = "error";
    } else if (state.mode === "paused") {
      while (state.credit > 0 && ready(state.steps[state.applied])) {
        apply(state.steps[state.applied]);
        state.credit -= 1;
      }
    } else if (state.mode === "playing") {
      const interval = 1000 / speed();
      if (interval === 0) {
        // As fast as possible, but let the page paint every few milliseconds.
        const until = performance.now() + 12;
        while (ready(state.steps[state.applied]) && performance.now() < until) apply(state.steps[state.applied]);
        if (ready(state.steps[state.applied])) state.timer = setTimeout(pump, 0);
      } else if (ready(state.steps[state.applied])) {
        const wait = state.lastAppliedAt + interval - performance.now();
        if (wait <= 0) {
          apply(state.steps[state.applied]);
          state.timer = setTimeout(pump, interval);
        } else {
          state.timer = setTimeout(pump, wait);
        }
      }
    }
    if (finished() && state.mode !== "error" && state.mode !== "done" && state.steps.length) {
      state.mode = "done";
      emit("kvscope:finished", {});
      window.kvscope.plot?.settled().then(render); // "done" once the charts have drawn their last points
    }
    render();
  }

  function rewind() {
    clearTimeout(state.timer);
    for (const step of state.steps) step.applied = false;
    state.applied = 0;
    state.firsts = 0;
    state.lastAppliedAt = 0;
    emit("kvscope:reset", { runs: state.runs, requests: state.total });
    for (const event of state.preamble) emit("kvscope:event", { event });
  }

  // -- controls -------------------------------------------------------------

  function start(paused) {
    state.startPaused = paused;
    $("#scenario-form")?.requestSubmit();
  }

  function play() {
    if (!state.steps.length && !state.streaming) return start(false);
    if (state.mode === "done") rewind();
    state.mode = "playing";
    pump();
  }

  function pause() {
    if (state.mode === "playing") state.mode = "paused";
    pump();
  }

  function step() {
    if (!state.steps.length && !state.streaming) return start(true);
    if (state.mode === "done") return;
    state.mode = "paused";
    state.credit = 1;
    pump();
  }

  function render() {
    const status = $("#player-status");
    if (!status) return;
    const step = state.steps[state.applied - 1];
    const request = step?.events.find((e) => e.type === "request");
    const scheduler = step?.events.find((e) => e.type === "step" && e.run === state.runs[0]);
    // A request is named by its seq, as everywhere else (from 0); the count of requests played is beside it.
    const progress = state.unit === "step"
      ? (step ? `Step ${step.seq}${scheduler ? ` · ${scheduler.running_seqs.length} running, ${scheduler.waiting_seqs.length} waiting in ${state.runs[0]}` : ""}`
        + ` · ${state.firsts} of ${state.total} requests have their first token` : `0 of ${state.total} requests`)
      : request
        ? `Request ${request.seq} (${state.applied} of ${state.total}) · pass ${request.pass} (${request.order}) · doc ${request.doc}`
        : `${state.applied} of ${state.total} requests`;
    const text = {
      idle: "Press Run to play the scenario, or Step to go one request at a time.",
      playing: `Playing. ${progress}.`,
      paused: state.applied ? `Paused. ${progress}.`
        : state.unit === "step" ? "Ready: press Step (one scheduler step) or Play." : "Ready: press Step or Play.",
      done: `Done: ${state.total} requests in every configuration${state.unit === "step" ? `, ${state.steps.length} scheduler steps` : ""}. Play replays it.`,
      error: `The stream failed: ${state.failed}.`,
    }[state.mode];
    if (status.textContent !== text) status.textContent = text;
    // Until the charts have drawn the last points (a frame or two later, one chart per frame), the run is "drawing".
    status.dataset.state = state.mode === "done" && window.kvscope.plot?.busy() ? "drawing" : state.mode;
    status.dataset.applied = String(state.applied);
    window.kvscope.playback.buttons($("#playback"), state.mode);
    const stepButton = $("#playback [data-action=step]");
    if (stepButton) {
      stepButton.title = state.unit === "step"
        ? "Apply the next scheduler step, in every configuration" : "Apply the next request, in every configuration";
    }
  }

  // -- wiring -----------------------------------------------------------------

  // htmx posts form-encoded; the stream endpoint takes the same JSON body as /api/simulate.
  document.addEventListener("htmx:before:request", (evt) => {
    const ctx = evt.detail.ctx;
    const source = ctx.sourceElement;
    if (source?.id !== "run-stream") return;
    if (source.hasAttribute("data-json-body")) {
      ctx.request.body = JSON.stringify(ctx.vals ?? {});
      ctx.request.headers["Content-Type"] = "application/json";
    }
    begin(source); // a new simulation's stream, or a kept run's stored events (GET /api/runs/{id}/events)
  });

  // Every SSE message of the run stream comes here (static/js/stream.js).
  window.kvscope.stream.take("run-stream", receive);

  document.addEventListener("htmx:sse:close", (evt) => {
    if (evt.target?.id === "run-stream" && evt.target.isConnected) streamEnded();
  });

  function failed(reason) {
    return (evt) => {
      if (evt.target?.id !== "run-stream") return;
      state.failed = typeof reason === "function" ? reason(evt) : reason;
      pump();
    };
  }
  document.addEventListener("htmx:error", failed("the server could not be reached"));
  document.addEventListener("htmx:sse:error", failed("the connection broke off"));
  document.addEventListener("htmx:response:error", failed((evt) => `the server answered ${evt.detail.ctx?.response?.status}`));

  document.addEventListener("click", (evt) => {
    const action = { play, pause, step }[window.kvscope.playback.action(evt, $("#playback"))];
    if (action) action();
  });

  // Run (the form's submit button) plays; Step without a run starts one paused.
  document.addEventListener("submit", (evt) => {
    if (evt.target.id === "scenario-form" && evt.submitter) state.startPaused = false;
  }, true);

  document.addEventListener("change", (evt) => {
    if (evt.target.matches?.("#playback [data-role=speed]")) pump();
  });

  document.addEventListener("htmx:after:swap", () => { if (loaded) viewChanged(); });
  document.addEventListener("DOMContentLoaded", () => {
    loaded = true;
    if (state.streaming || state.steps.length) {
      rewind(); // the held stream, from its start, now that every panel listens
      pump();
    } else {
      viewChanged();
    }
    render();
  });
})();
