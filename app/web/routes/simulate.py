"""The simulation API: ``POST /api/simulate`` (the ``simulate --json`` result), its SSE step stream, and the presets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent

from app.scenario_input import ScenarioInput
from app.web.context import Web
from app.web.inputs import InputErrors, StreamInput, check
from app.web.sse import event_stream
from sim.presets import DESCRIPTIONS, PRESETS
from sim.scenario import Scenario
from sim.simulation import simulate, stream


@dataclass(frozen=True, slots=True)
class StreamJob:
    scenario: Scenario
    pace_s: float


def scenario_of(body: ScenarioInput) -> Scenario:
    try:
        return check(body)
    except InputErrors as exc:
        raise exc.for_body() from None


def stream_job_of(body: StreamInput) -> StreamJob:
    # A dependency, so that a bad body gets its 422 before the stream's 200 starts.
    try:
        return StreamJob(check(body, streamed=True), body.pace_ms / 1000)
    except InputErrors as exc:
        raise exc.for_body() from None


def router(*, web: Web) -> APIRouter:
    api = APIRouter(prefix="/api", tags=["simulate"])

    @api.post("/simulate", summary="Simulate a scenario", response_class=JSONResponse)
    def simulate_route(
        scenario: Annotated[Scenario, Depends(scenario_of)],
        explain: Annotated[bool, Query(description="each miss's cause (gpu_miss, computed); false is --no-explain")] = True,
    ) -> JSONResponse:
        """The same JSON as ``kvscope simulate --json`` with the same flags: ``{"docs": 20}`` is ``--docs 20``."""
        return JSONResponse(simulate(scenario, explain=explain))

    @api.post("/simulate/stream", summary="Stream a simulation step by step", response_class=EventSourceResponse)
    async def simulate_stream(
        job: Annotated[StreamJob, Depends(stream_job_of)],
        explain: Annotated[bool, Query(description="send each request's misses by cause (explain)")] = True,
    ) -> AsyncIterator[ServerSentEvent]:
        """One SSE message per core event (``run``, ``request``, ``lookup``, ``evict``, ``load``, ``store``,
        ``occupancy``, ``explain``, ``ttft``, ``pass``, ``done``; ``error`` on failure), runs interleaved request
        by request. The message's ``event`` is the kind and its ``data`` the event as JSON. Disconnecting stops
        the work."""
        async for item in event_stream(stream(job.scenario, explain=explain), web.streams, pace_s=job.pace_s):
            yield item

    @api.get("/presets", summary="The named starting points")
    def presets() -> list[dict[str, Any]]:
        """Each preset's name, one-line description and fields (any of which a body may override)."""
        return [{"name": name, "description": DESCRIPTIONS.get(name, ""), "fields": fields} for name, fields in PRESETS.items()]

    return api
