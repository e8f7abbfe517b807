"""The fleet API: ``POST /api/fleet``, ``kvscope fleet --json``'s result for a scenario served by N replicas behind
each router given. Simulated in the web's worker pool within the budget and deadline, as ``/api/simulate``; not kept
in the runs database."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import ValidationError, create_model
from starlette.concurrency import run_in_threadpool

from app.scenario_input import SimulateInput
from app.web.context import Web
from app.web.inputs import InputErrors, errors_of, strict_json, within
from app.web.json_response import JSONResponse
from app.web.routes.simulate import served_of
from sim.fleet.replicas import FleetError
from sim.fleet.settings import FleetSettings
from sim.fleet.simulate import check_fleet, fleet_result, scenario_fleet_cost
from sim.sched.serving import Serving
from sim.sched.simulate import refusal
from sim.workloads.scenario import Scenario, StorageTier

_fleet_fields = {name: (info.annotation, info) for name, info in FleetSettings.model_fields.items()}
# The shared tier as text too (``remote:8:lru:0.01``), parsed by FleetSettings as the CLI's is.
_shared = FleetSettings.model_fields["shared_tier"]
_fleet_fields["shared_tier"] = (str | StorageTier | None, _shared)


class FleetInput(create_model("_Fleet", __base__=SimulateInput, **_fleet_fields)):  # type: ignore[misc]
    """``/api/fleet``'s body: ``/api/simulate``'s, and the fleet (``--replicas 4`` is ``{"replicas": 4}``, ``--router``
    repeated is ``"routers": [...]``, ``--shared-tier`` is ``"shared_tier"``)."""

    def fleet(self) -> FleetSettings:
        return FleetSettings(**{name: getattr(self, name) for name in FleetSettings.model_fields})


def fleet_of(body: Annotated[FleetInput, strict_json(FleetInput)]) -> tuple[Scenario, Serving, FleetSettings]:
    """The body's scenario, serving and fleet (422 naming the field when they do not combine)."""
    scenario, serving = served_of(body)
    try:
        settings = body.fleet()
        check_fleet(scenario, settings, serving)
    except ValidationError as exc:
        raise InputErrors(errors_of(exc)).for_body() from None
    except FleetError as exc:
        raise InputErrors([{"type": "value_error", "loc": (exc.field,), "msg": str(exc)}]).for_body() from None
    if (refused := refusal(scenario, serving)) is not None:
        raise InputErrors([{"type": "value_error", "loc": (refused[0],), "msg": refused[1]}]).for_body()
    return scenario, serving, settings


def router(*, web: Web) -> APIRouter:
    api = APIRouter(prefix="/api", tags=["fleet"])

    @api.post("/fleet", summary="Compare routers over a fleet of replicas", response_class=JSONResponse)
    async def fleet_route(served: Annotated[tuple[Scenario, Serving, FleetSettings], Depends(fleet_of)]) -> JSONResponse:
        """The same JSON as ``kvscope fleet --json`` with the same flags: ``{"replicas": 4, "routers": ["round-robin",
        "affinity"], "concurrency": 8}`` is ``--replicas 4 --router round-robin --router affinity --concurrency 8``.
        A fleet whose estimated work, memory or answer exceeds the server's budget is a 422 naming the limit; a busy
        server or a run past its deadline answers 503."""
        scenario, serving, settings = served
        try:
            within(web.workers.budget.per_request, scenario_fleet_cost(scenario, serving, settings))
        except InputErrors as exc:
            raise exc.for_body() from None
        result = await web.workers.run(fleet_result, scenario, serving, settings)
        return await run_in_threadpool(JSONResponse, result)  # rendered off the event loop: /healthz must not wait

    return api
