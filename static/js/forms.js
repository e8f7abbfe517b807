// Every form's working state, one mechanism for the page: while a form's request runs, the form is aria-busy, its
// submit buttons are disabled (and show a spinner), and the area its answer goes to is marked busy. When the request
// fails without an answer in that area (a network error, a 5xx, or a 422 whose errors went beside the fields), the
// result still shown there is marked stale: greyed, with a line saying why, until the next answer replaces it; an area
// with nothing in it yet gets the line alone.
// htmx forms (every form of the page) are followed through htmx 4's request events; a script that posted with fetch
// would call kvscope.forms.start(form, area) and kvscope.forms.finish(form, area, error) itself.
(() => {
  "use strict";

  const disabledBy = new WeakMap(); // form -> the buttons this module disabled

  function start(form, area) {
    if (!form) return;
    form.setAttribute("aria-busy", "true");
    const buttons = [...form.querySelectorAll('button[type="submit"], button:not([type])')].filter((b) => !b.disabled);
    for (const b of buttons) { b.disabled = true; b.dataset.busy = "true"; }
    disabledBy.set(form, buttons);
    if (area) area.setAttribute("aria-busy", "true");
  }

  /** Ends the working state; `error` (words) marks what `area` still shows as stale, null clears the mark. */
  function finish(form, area, error) {
    if (form) {
      form.removeAttribute("aria-busy");
      for (const b of disabledBy.get(form) ?? []) { b.disabled = false; delete b.dataset.busy; }
      disabledBy.delete(form);
    }
    if (!area) return;
    area.removeAttribute("aria-busy");
    if (error) stale(area, error);
    else fresh(area);
  }

  // With nothing shown yet (a first request that failed), the note says so where the answer would have been: a busy
  // server's 503 must not look like a click that did nothing.
  function stale(area, why) {
    let note = area.querySelector(":scope > .stale-note");
    const earlier = [...area.childNodes].some((n) => n !== note && n.textContent.trim());
    if (!note) {
      note = document.createElement("p");
      note.className = "stale-note";
      note.setAttribute("role", "status");
      area.prepend(note);
    }
    if (earlier) {
      area.dataset.stale = "true";
      note.textContent = `Out of date: ${why}. What is shown below is the earlier result.`;
    } else {
      delete area.dataset.stale;
      note.textContent = `No answer: ${why}. Try again.`;
    }
  }

  function fresh(area) {
    delete area.dataset.stale;
    area.querySelector(":scope > .stale-note")?.remove();
  }

  // -- htmx forms -------------------------------------------------------------

  const pending = new WeakMap(); // ctx -> {form, area, swapped}

  function formOf(ctx) {
    const source = ctx?.sourceElement;
    return source instanceof HTMLFormElement ? source : null; // a form's own submission, not a select inside it
  }

  document.addEventListener("htmx:before:request", (evt) => {
    const ctx = evt.detail?.ctx;
    const form = formOf(ctx);
    if (!form) return;
    const area = ctx.target instanceof Element ? ctx.target : null;
    pending.set(ctx, { form, area, swapped: false });
    start(form, area);
  });

  // An error the server answered with one of its partials (HTML: a problem named beside the form) is swapped in as
  // usual; any other (a busy server's 503, a proxy's page) is not put where the result goes.
  document.addEventListener("htmx:after:request", (evt) => {
    const ctx = evt.detail?.ctx;
    if (!pending.has(ctx)) return;
    const status = ctx.response?.status ?? 0;
    const html = (ctx.response?.headers?.get("content-type") ?? "").startsWith("text/html");
    if (status >= 400 && !html) evt.preventDefault();
  });

  // htmx 4 fires after:swap on the form, not on what was swapped: the answer went where the request's target ended up
  // (a server's HX-Retarget moves it, e.g. a refused Run's errors go beside the fields, and the area keeps its result).
  document.addEventListener("htmx:after:swap", (evt) => {
    const ctx = evt.detail?.ctx;
    const job = pending.get(ctx);
    if (!job || !job.area || String(ctx.swap ?? "").startsWith("none")) return;
    const target = typeof ctx.target === "string" ? document.querySelector(ctx.target) : ctx.target;
    if (target instanceof Element && (target === job.area || job.area.contains(target))) job.swapped = true;
  });

  document.addEventListener("htmx:finally:request", (evt) => {
    const ctx = evt.detail?.ctx;
    const job = pending.get(ctx);
    if (!job) return;
    pending.delete(ctx);
    const status = ctx.response?.status;
    let error = null;
    if (!status) error = "the request did not complete (no answer from the server)";
    else if (status >= 400 && !job.swapped) error = status === 422 ? "the input was refused (see the fields)" : answered(ctx);
    finish(job.form, job.area, job.swapped ? null : error);
  });

  /** What the server said with an error status: its answer's text (an error partial or a JSON detail), else the status. */
  function answered(ctx) {
    const status = ctx.response?.status;
    const body = (ctx.text || "").trim();
    let said = "";
    if (body.startsWith("{")) {
      try { said = String(JSON.parse(body).detail ?? ""); } catch { said = ""; }
    } else if (body) {
      said = new DOMParser().parseFromString(body, "text/html").body.textContent.trim();
    }
    return said ? `the server answered ${status}: ${said.slice(0, 300)}` : `the server answered ${status}`;
  }

  /** A panel's state and status line for its form (`formId`): `working` while the request runs; when it ends with no
   * answer (the network, a 5xx), "failed" and `failed` with the reason. An answer sets the rest itself. */
  function follow(formId, panelId, statusId, working, failed) {
    const mine = (evt) => evt.detail?.ctx?.sourceElement?.id === formId;
    document.addEventListener("htmx:before:request", (evt) => {
      if (!mine(evt)) return;
      document.getElementById(panelId).dataset.state = "working";
      document.getElementById(statusId).textContent = working;
    });
    document.addEventListener("htmx:finally:request", (evt) => {
      if (!mine(evt)) return;
      const ctx = evt.detail.ctx;
      const status = ctx.response?.status;
      if (status && status < 500) return;
      document.getElementById(panelId).dataset.state = "failed";
      document.getElementById(statusId).textContent = `${failed}: ${status ? answered(ctx) : "no answer from the server"}`;
    });
  }

  window.kvscope = { ...window.kvscope, forms: { start, finish, stale, fresh, follow } };
})();
