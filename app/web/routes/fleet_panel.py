"""The page's Fleet panel: ``GET /ui/fleet`` (the form) and ``POST /ui/fleet`` (``/api/fleet``'s fleet, answered with
the partials under ``templates/fleet/``: the per-router table, the TTFT chart's data and each replica's strip; or,
refused, the fields with the error beside the field it names)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from app.web import fleet_view
from app.web.context import Web
from app.web.inputs import InputErrors, errors_by_field, errors_of, within
from app.web.routes.fleet import FleetInput, fleet_of
from sim.fleet.routers import ROUTER_NAMES
from sim.fleet.settings import DEFAULT_ROUTERS
from sim.fleet.simulate import fleet_result, scenario_fleet_cost
from sim.workloads.presets import PRESETS

# The form's fields, named as /api/fleet's body names them (so an error's field is the form's); "routers" repeats.
FIELDS = (
    "preset", "replicas", "routers", "docs", "passes", "concurrency", "rate", "async_scheduling", "gpu_tokens", "cpu_gb",
    "cpu_backend", "shared_tier",
)
# The form's starting values: the fleet's defaults, and a closed loop of a few requests in flight (a fleet is served
# under load: one request at a time would leave all replicas but one idle).
START = {"preset": "seed-lab", "replicas": "2", "routers": DEFAULT_ROUTERS, "concurrency": "4"}


def field_errors(errors: list[dict[str, Any]]) -> dict[str, str]:
    """Each field's first error by the form's field name; no router ticked is said as the form asks for it."""
    said = [{**e, "msg": "tick at least one router"} if e.get("type") == "too_short" and "routers" in e.get("loc", ()) else e
            for e in errors]
    return errors_by_field(said, FIELDS)


def router(*, web: Web) -> APIRouter:
    pages = APIRouter(tags=["fleet"], include_in_schema=False)

    def render(request: Request, name: str, status_code: int = 200, headers: dict[str, str] | None = None, **context: Any) -> HTMLResponse:
        context = {"presets": list(PRESETS), "router_names": ROUTER_NAMES, "form_model": FleetInput, "errors": {}, **context}
        return web.templates.TemplateResponse(request, name, context, status_code=status_code, headers=headers)

    @pages.get("/ui/fleet", response_class=HTMLResponse)
    def panel(request: Request) -> HTMLResponse:
        """The Fleet view's panel: its form with the starting values (the view loads it after the page)."""
        return render(request, "fleet/panel.html", values=START)

    @pages.post("/ui/fleet", response_class=HTMLResponse)
    async def panel_fleet(request: Request) -> HTMLResponse:
        """The panel's answer: the per-router table, the chart's data and the strips; on bad input, 422 and the fields
        redrawn with their errors (morphed, so the focus stays)."""
        form = await request.form()
        values: dict[str, Any] = {k: v.strip() for k, v in form.items() if k in FIELDS and k != "routers" and isinstance(v, str)}
        values["routers"] = tuple(v for v in form.getlist("routers") if isinstance(v, str))
        # The routers always: none ticked is refused at their field, not taken as the defaults.
        given = {**{k: v for k, v in values.items() if v}, "routers": values["routers"]}
        try:
            try:
                scenario, serving, settings = fleet_of(FleetInput(**given))
            except ValidationError as exc:
                raise RequestValidationError(errors_of(exc)) from None
            try:
                within(web.workers.budget.per_request, scenario_fleet_cost(scenario, serving, settings, holdings=True))
            except InputErrors as exc:
                raise exc.for_body() from None
            # With what each replica holds at each arrival: the view plays it (static/js/fleetplay.js).
            result = await web.workers.run(fleet_result, scenario, serving, settings, True)
        except RequestValidationError as exc:
            return render(request, "fleet/fields.html", status_code=422, values=values, errors=field_errors(list(exc.errors())),
                          headers={"HX-Retarget": "#fleet-fields", "HX-Reswap": "outerMorph"})
        view = await run_in_threadpool(fleet_view.build, result)
        return render(request, "fleet/result.html", view=view, values=values)

    return pages
