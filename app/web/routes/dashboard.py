"""The dashboard's views (``GET /``, ``/replay``, ``/plan``, ``/live``, ``/runs``: app.web.views) and the Simulate view's
HTMX partials: the form's fields for a preset, and a run to play.

Simulate's run is a list of panels (``PANELS``); each is a partial under
``templates/panels/`` with the scripts it needs. A panel's partial gets the
``run`` (an ``app.web.run_view.RunView``) and its script follows the player's
DOM events (see ``static/js/player.js``). Adding a panel: write the partial and
its script, append a ``Panel`` here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from functools import cache
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from app.web import run_view, scenario_form, stored
from app.web.context import Web
from app.web.inputs import InputErrors, check, errors_of, within
from app.web.planned import Planned
from app.web.routes.simulate import KeptStream, kept_stream, send, serving_of, simulated_job
from app.web.scenario_form import FormView
from app.web.sse import OpenStreams, open_streams
from app.web.views import BY_NAME, VIEWS, View
from sim.sched.serving import Serving
from sim.sched.simulate import stepped_cost
from sim.simulation.run import simulate
from sim.workloads.estimate import simulation_cost
from sim.workloads.presets import PRESETS
from sim.workloads.scenario import Scenario

DEFAULT_PRESET = "seed-lab"


@dataclass(frozen=True, slots=True)
class Panel:
    """A section of the page: its partial (gets ``run``) and its scripts under static/."""

    template: str
    scripts: tuple[str, ...] = ()


PANELS = [
    Panel("panels/lanes.html", ("js/lanes.js",)),
    Panel("panels/steps.html", ("js/steps.js",)),  # under load only
    Panel("panels/chart.html", ("js/chart.js", "js/causes.js", "js/queue.js")),
    Panel("panels/log.html", ("js/log.js",)),
    Panel("panels/table.html", ("js/table.js",)),
]


class PlannedToken(BaseModel):
    """The body of a checked run's stream: the token /ui/run gave it."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(max_length=64, description="from the run's panels (app.web.planned)")


# Checked runs waiting for their streams (one server process serves the page and its streams), with how they are
# served when the stepped engine serves them (None: one request at a time, the sequential engine).
PLANNED: Planned[tuple[Scenario, Serving | None]] = Planned()


def under_load(serving: Serving) -> Serving | None:
    """The serving settings when the page plays them with the stepped engine: requests overlap, or a scheduler flag
    is given. One request at a time with vLLM's defaults (``concurrency`` empty or 1) plays as it always has."""
    return serving if serving.overlapping or serving.given() else None


async def planned_stream(body: PlannedToken, request: Request, response: Response) -> KeptStream:
    """A dependency: the checked run the token names, kept as it streams; unknown, taken or expired is a 410 before
    the stream's 200 starts."""
    planned = PLANNED.take(body.token)
    if planned is None:
        raise HTTPException(410, "this run's stream was already sent or has expired: press Run again")
    scenario, serving = planned
    # The one simulation of the run, in the worker pool like every stream's (busy: 503 before the stream starts).
    job = await simulated_job(request, scenario, 0.0, serving=serving)
    return kept_stream(job, request, response)


@cache
def _initial_run() -> run_view.RunView:
    """The default preset, not yet played: the same for every visitor, so simulated once."""
    scenario = check(scenario_form.parse({"preset": DEFAULT_PRESET}))
    return run_view.build(scenario, simulate(scenario))


def _played_run(scenario: Scenario, stream_body: dict[str, Any], serving: Serving | None) -> run_view.RunView:
    """A run's panels, planned from the scenario (in a worker process): its stream, the one simulation, fills them."""
    return run_view.plan(scenario, stream_body, serving)


def router(*, web: Web) -> APIRouter:
    pages = APIRouter(tags=["dashboard"], include_in_schema=False)
    templates = web.templates

    async def planned_run(scenario: Scenario, stream_body: dict[str, Any], serving: Serving | None = None) -> run_view.RunView:
        """The run's panels, and its checked scenario (and serving) left for its stream to take."""
        view = await web.workers.run(_played_run, scenario, stream_body, serving)
        return replace(view, stream_token=PLANNED.put((scenario, serving)))

    @pages.post("/ui/run/stream", response_class=EventSourceResponse)
    async def run_stream(
        kept: Annotated[KeptStream, Depends(planned_stream)], opened: Annotated[OpenStreams, Depends(open_streams)]
    ) -> AsyncIterator[ServerSentEvent]:
        """The stream of a run /ui/run checked: the same messages as /api/simulate/stream, kept as a run the same way."""
        async for item in opened.closing(send(kept, web.streams)):
            yield item

    def render(request: Request, name: str, status_code: int = 200, headers: dict[str, str] | None = None, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, {"panels": PANELS, **context}, status_code=status_code, headers=headers)

    def render_view(request: Request, view: View, status_code: int = 200, **context: Any) -> HTMLResponse:
        """A whole view; the sidebar's form (the default preset unless given) where the view shows the sidebar."""
        if view.sidebar:
            context.setdefault("form", scenario_form.preset_view(DEFAULT_PRESET))
        if view.name == "simulate":
            context.setdefault("run", _initial_run())
        return render(request, "dashboard.html", status_code=status_code, view=view, views=VIEWS, **context)

    @pages.get("/", response_class=HTMLResponse)
    async def dashboard(request: Request) -> Response:
        """The Simulate view; ``?run=ID`` replays a kept run (in the view that shows its kind), ``?scenario=PRESET&docs=12...``
        runs a scenario."""
        query = dict(request.query_params)
        if "run" in query:
            return await stored_run(request, BY_NAME["simulate"], query["run"])
        if "scenario" in query:
            return await linked_scenario(request, query)
        return render_view(request, BY_NAME["simulate"])

    def view_route(view: View) -> None:
        async def show(request: Request) -> Response:
            if "run" in request.query_params:
                return await stored_run(request, view, request.query_params["run"])
            return render_view(request, view)

        show.__doc__ = f"The {view.label} view: {view.title}; ``?run=ID`` opens a kept run of its kind."
        pages.add_api_route(view.path, show, methods=["GET"], response_class=HTMLResponse, name=f"view-{view.name}")

    for other in VIEWS:
        if other.path != "/":
            view_route(other)

    async def stored_run(request: Request, view: View, raw_id: str) -> Response:
        """A kept run in the view that shows its kind: a simulation in Simulate's lanes, played from its stored events;
        a live run in Live & Watch, a proxy or watch recording there too, a trace replay in Trace replay, any other in
        Runs. Asked of another view, it is a redirect to that one, so the address names the view that shows it."""
        try:
            opened = await run_in_threadpool(stored.open_run, web.runs, raw_id)
        except stored.NotOpened as exc:
            if view.name != "runs":
                return RedirectResponse(f"{BY_NAME['runs'].path}?run={quote(raw_id, safe='')}", status_code=303)
            return render_view(request, view, status_code=exc.status, runs_notice=str(exc))
        context: dict[str, Any]
        if opened.live is not None:
            where, context = "live", {"live_run": opened.live}
        elif opened.watch is not None:
            where, context = "live", {"watch_run": opened.watch}
        elif opened.replay:
            where, context = "replay", {"replay_run": opened.id}
        elif opened.view is None:
            where, context = "runs", {"open_run": opened.id}
        else:
            where, context = "simulate", {"form": opened.form, "run": opened.view, "costs": opened.costs}
        if where != view.name:
            return RedirectResponse(f"{BY_NAME[where].path}?run={opened.id}", status_code=303)
        return render_view(request, view, **context)

    async def linked_scenario(request: Request, query: dict[str, str]) -> HTMLResponse:
        """The scenario a link names, run at once; a bad field is shown beside it (422) as the Run button would."""
        preset = query.get("scenario") or DEFAULT_PRESET
        try:
            body = stored.scenario_input(preset, query)
            scenario = check(body, streamed=True)
            serving = under_load(serving_of(body, scenario))
        except (ValidationError, InputErrors) as exc:
            errors = errors_of(exc) if isinstance(exc, ValidationError) else exc.errors
            # Said above the lanes too: the field may be out of sight (further down the sidebar, or in More settings).
            said = "; ".join(f"{e['loc'][-1]}: {e['msg']}" for e in errors[:3]) + ("; ..." if len(errors) > 3 else "")
            return render_view(request, BY_NAME["simulate"], status_code=422, form=stored.form_of(preset, query, errors),
                               link_problem=f"This link's scenario was refused ({said}): see the fields.")
        stream_body = body.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        view = await planned_run(scenario, stream_body, serving)
        return render_view(request, BY_NAME["simulate"], form=stored.form_of(preset, query), run=view,
                           costs=stored.costs_of(scenario, "the link's costs"))

    @pages.get("/ui/fields", response_class=HTMLResponse)
    def fields(request: Request, preset: str = Query(DEFAULT_PRESET)) -> HTMLResponse:
        """The form's fields filled with a preset's values (the preset menu swaps them in)."""
        if preset not in PRESETS:
            preset = DEFAULT_PRESET
        return render(request, "partials/fields.html", form=scenario_form.preset_view(preset))

    @pages.post("/ui/run", response_class=HTMLResponse)
    async def run(request: Request) -> HTMLResponse:
        """A run's panels, with the element that starts its step stream; or, on bad input, 422 and the fields with errors."""
        values = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        preset = values.get("preset", DEFAULT_PRESET)
        try:
            body = scenario_form.parse(values)
            scenario = check(body, streamed=True)
            serving = under_load(serving_of(body, scenario))
        except ValidationError as exc:
            return invalid(request, scenario_form.view(preset, values, errors_of(exc)))
        except InputErrors as exc:
            return invalid(request, scenario_form.view(preset, values, exc.errors))
        try:
            cost = simulation_cost(scenario) if serving is None else stepped_cost(scenario, serving)
            within(web.workers.budget.per_request, cost)
        except InputErrors as exc:
            return invalid(request, scenario_form.view(preset, values, exc.errors))
        stream_body = body.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        # Off the event loop: a large scenario takes a while, and open streams must keep flowing meanwhile.
        run = await planned_run(scenario, stream_body, serving)
        return render(request, "partials/run.html", run=run, form=scenario_form.view(preset, values), swap_fields=True)

    def invalid(request: Request, form: FormView) -> HTMLResponse:
        # The fields (not the whole run area) are redrawn with their errors; morphing keeps the focus where it was.
        return render(
            request, "partials/fields.html", status_code=422, form=form,
            headers={"HX-Retarget": "#scenario-fields", "HX-Reswap": "outerMorph"},
        )

    return pages
