"""The dashboard page (``GET /``) and its HTMX partials: the form's fields for a preset, and a run to play.

The page is a list of panels (``PANELS``); each is a partial under
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

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.responses import HTMLResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from app.web import run_view, scenario_form, stored
from app.web.context import Web
from app.web.inputs import InputErrors, check, errors_of, within
from app.web.planned import Planned
from app.web.routes.simulate import KeptStream, kept_stream, send, simulated_job
from app.web.scenario_form import FormView
from app.web.sse import OpenStreams, open_streams
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
    Panel("panels/chart.html", ("js/chart.js", "js/causes.js")),
    Panel("panels/log.html", ("js/log.js",)),
    Panel("panels/table.html", ("js/table.js",)),
]


class PlannedToken(BaseModel):
    """The body of a checked run's stream: the token /ui/run gave it."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(max_length=64, description="from the run's panels (app.web.planned)")


# Checked runs waiting for their streams (one server process serves the page and its streams).
PLANNED: Planned[Scenario] = Planned()


async def planned_stream(body: PlannedToken, request: Request, response: Response) -> KeptStream:
    """A dependency: the checked run the token names, kept as it streams; unknown, taken or expired is a 410 before
    the stream's 200 starts."""
    scenario = PLANNED.take(body.token)
    if scenario is None:
        raise HTTPException(410, "this run's stream was already sent or has expired: press Run again")
    # The one simulation of the run, in the worker pool like every stream's (busy: 503 before the stream starts).
    return kept_stream(await simulated_job(request, scenario, 0.0), request, response)


@cache
def _initial_run() -> run_view.RunView:
    """The default preset, not yet played: the same for every visitor, so simulated once."""
    scenario = check(scenario_form.parse({"preset": DEFAULT_PRESET}))
    return run_view.build(scenario, simulate(scenario))


def _played_run(scenario: Scenario, stream_body: dict[str, Any]) -> run_view.RunView:
    """A run's panels, planned from the scenario (in a worker process): its stream, the one simulation, fills them."""
    return run_view.plan(scenario, stream_body)


def router(*, web: Web) -> APIRouter:
    pages = APIRouter(tags=["dashboard"], include_in_schema=False)
    templates = web.templates

    async def planned_run(scenario: Scenario, stream_body: dict[str, Any]) -> run_view.RunView:
        """The run's panels, and its checked scenario left for its stream to take."""
        view = await web.workers.run(_played_run, scenario, stream_body)
        return replace(view, stream_token=PLANNED.put(scenario))

    @pages.post("/ui/run/stream", response_class=EventSourceResponse)
    async def run_stream(
        kept: Annotated[KeptStream, Depends(planned_stream)], opened: Annotated[OpenStreams, Depends(open_streams)]
    ) -> AsyncIterator[ServerSentEvent]:
        """The stream of a run /ui/run checked: the same messages as /api/simulate/stream, kept as a run the same way."""
        async for item in opened.closing(send(kept, web.streams)):
            yield item

    def render(request: Request, name: str, status_code: int = 200, headers: dict[str, str] | None = None, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, {"panels": PANELS, **context}, status_code=status_code, headers=headers)

    @pages.get("/", response_class=HTMLResponse)
    async def dashboard(request: Request) -> HTMLResponse:
        """The page; ``?run=ID`` replays a kept run, ``?scenario=PRESET&docs=12...`` runs a scenario."""
        query = dict(request.query_params)
        if "run" in query:
            return await stored_run(request, query["run"])
        if "scenario" in query:
            return await linked_scenario(request, query)
        return render(request, "dashboard.html", form=scenario_form.preset_view(DEFAULT_PRESET), run=_initial_run())

    async def stored_run(request: Request, raw_id: str) -> HTMLResponse:
        """A kept simulation in the lanes, played from its stored events; any other kind opens in the Runs area."""
        default = {"form": scenario_form.preset_view(DEFAULT_PRESET), "run": _initial_run()}
        try:
            opened = await run_in_threadpool(stored.open_run, web.runs, raw_id)
        except stored.NotOpened as exc:
            return render(request, "dashboard.html", status_code=exc.status, runs_notice=str(exc), **default)
        # A run the lanes do not play opens in its panel, further down: the line above the lanes says where.
        if opened.live is not None:
            where = {"id": opened.id, "panel": "the live panel", "anchor": "live-area"}
            return render(request, "dashboard.html", live_run=opened.live, opened_in=where, **default)
        if opened.watch is not None:
            where = {"id": opened.id, "panel": "the watch panel", "anchor": "watch-area"}
            return render(request, "dashboard.html", watch_run=opened.watch, opened_in=where, **default)
        if opened.replay:
            where = {"id": opened.id, "panel": "the replay panel", "anchor": "replay-area"}
            return render(request, "dashboard.html", replay_run=opened.id, opened_in=where, **default)
        if opened.view is None:
            where = {"id": opened.id, "panel": "Runs", "anchor": "runs-area"}
            return render(request, "dashboard.html", open_run=opened.id, opened_in=where, **default)
        return render(request, "dashboard.html", form=opened.form, run=opened.view, costs=opened.costs)

    async def linked_scenario(request: Request, query: dict[str, str]) -> HTMLResponse:
        """The scenario a link names, run at once; a bad field is shown beside it (422) as the Run button would."""
        preset = query.get("scenario") or DEFAULT_PRESET
        try:
            body = stored.scenario_input(preset, query)
            scenario = check(body, streamed=True)
        except (ValidationError, InputErrors) as exc:
            errors = errors_of(exc) if isinstance(exc, ValidationError) else exc.errors
            # Said above the lanes too: the field may be out of sight (further down the sidebar, or in More settings).
            said = "; ".join(f"{e['loc'][-1]}: {e['msg']}" for e in errors[:3]) + ("; ..." if len(errors) > 3 else "")
            return render(request, "dashboard.html", status_code=422, form=stored.form_of(preset, query, errors), run=_initial_run(),
                          link_problem=f"This link's scenario was refused ({said}): see the fields.")
        stream_body = body.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        view = await planned_run(scenario, stream_body)
        return render(request, "dashboard.html", form=stored.form_of(preset, query), run=view, costs=stored.costs_of(scenario, "the link's costs"))

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
        except ValidationError as exc:
            return invalid(request, scenario_form.view(preset, values, errors_of(exc)))
        except InputErrors as exc:
            return invalid(request, scenario_form.view(preset, values, exc.errors))
        try:
            within(web.workers.budget.per_request, simulation_cost(scenario))
        except InputErrors as exc:
            return invalid(request, scenario_form.view(preset, values, exc.errors))
        stream_body = body.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        # Off the event loop: a large scenario takes a while, and open streams must keep flowing meanwhile.
        run = await planned_run(scenario, stream_body)
        return render(request, "partials/run.html", run=run, form=scenario_form.view(preset, values), swap_fields=True)

    def invalid(request: Request, form: FormView) -> HTMLResponse:
        # The fields (not the whole run area) are redrawn with their errors; morphing keeps the focus where it was.
        return render(
            request, "partials/fields.html", status_code=422, form=form,
            headers={"HX-Retarget": "#scenario-fields", "HX-Reswap": "outerMorph"},
        )

    return pages
