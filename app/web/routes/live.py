"""Live mode on the web: the targets named at start-up with their health, and live runs streamed as SSE.

API: ``GET /api/live/targets``; ``POST /api/live/runs`` (a scenario, as for
``/api/simulate``, plus target names) creates a run and reserves its targets;
``GET /api/live/runs/{id}/events`` streams it (once) in the core event
vocabulary plus ``measured`` and ``warning``; ``GET /api/live/runs/{id}/records``
is its measurement file so far. The page's live panel uses the same functions.

No URL ever comes from a request: the body names targets, every field it does
not define is refused (422, e.g. ``url``), and a name that was not configured
at start-up is refused too. Responses carry target names, never URLs.
"""

# No ``from __future__ import annotations``: the routes' dependencies are closures, which FastAPI can only see
# in annotations evaluated where the routes are defined.
import asyncio
import io
from collections.abc import AsyncIterator
from dataclasses import asdict, replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import Field, ValidationError, field_validator
from starlette.concurrency import run_in_threadpool

from app.live.client import TargetError, VllmClient
from app.live.registry import KEPT_RUNS, BusyTargets, LiveRunEntry, LiveRuns, RunState
from app.live.session import (
    DEFAULT_TIMEOUT_S,
    MAX_COMPLETION_TOKENS,
    MAX_CONCURRENCY,
    MAX_TIMEOUT_S,
    LiveOptions,
    LiveRun,
)
from app.live.targets import Target
from app.runs.recording import LiveRecorder
from app.scenario_input import ScenarioInput
from app.web.context import Web
from app.web.inputs import MAX_STREAM_DOCS, InputErrors, check, errors_of, strict_json
from app.web.routes.simulate import STATUS_OF
from app.web.sse import Encoded, Outcome, Streamable, event_stream
from sim.calibration import measurements
from sim.engine.events import Event
from sim.workloads.presets import DESCRIPTIONS, PRESETS
from sim.workloads.scenario import Scenario

MAX_TARGETS = 8
PROBE_TIMEOUT_S = 5.0


class LiveRunInput(ScenarioInput):
    """A scenario (the same fields as ``/api/simulate``) to run against configured targets, named."""

    targets: list[str] = Field(min_length=1, max_length=MAX_TARGETS, description="names of targets configured at start-up")
    concurrency: int = Field(default=1, ge=1, le=MAX_CONCURRENCY, description="requests in flight per target")
    max_tokens: int = Field(default=4, ge=1, le=MAX_COMPLETION_TOKENS, description="tokens to generate per request")
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S, description="seconds to wait for any one answer")
    side_by_side: bool = Field(default=False, description="measure the targets at the same time, not one after the other")

    @field_validator("targets")
    @classmethod
    def _distinct(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError("a target is named twice")
        return names


def router(*, web: Web) -> APIRouter:
    configured: dict[str, Target] = {t.name: t for t in web.live_targets}
    runs = LiveRuns()
    api = APIRouter(tags=["live"])

    def create(body: LiveRunInput) -> LiveRunEntry:
        unknown = [name for name in body.targets if name not in configured]
        if unknown:
            known = ", ".join(configured) or "none (start the server with --target NAME=URL)"
            raise InputErrors(
                [{"type": "value_error", "loc": ("targets",), "msg": f"unknown target {', '.join(unknown)}; configured: {known}"}]
            )
        scenario = check(body, streamed=True)
        options = LiveOptions(body.concurrency, body.max_tokens, body.timeout_s, body.side_by_side)
        run = LiveRun(scenario, [configured[n] for n in body.targets], options)
        entry = runs.create(run)  # before the recorder: a busy target keeps nothing
        forget_unstarted()
        recorder = LiveRecorder(web.runs, scenario, body.targets, asdict(options))
        run.sink = recorder.sink
        recorders[entry.id] = recorder
        return entry

    # The kept run of each live run, until its stream ends (or it expires unstarted).
    recorders: dict[str, LiveRecorder] = {}

    def forget_unstarted() -> None:
        for run_id in list(recorders):
            entry = runs.get(run_id)
            if entry is None or entry.state is RunState.EXPIRED or (entry.state is RunState.CREATED and not entry.holds_targets):
                recorders.pop(run_id).finish_later("stopped")  # nobody waits for it

    def kept(entry: LiveRunEntry) -> dict[str, Any]:
        recorder = recorders.get(entry.id)
        if recorder is None:
            return {}
        return {"run_id": recorder.run_id, **({"run_error": recorder.problem} if recorder.problem else {})}

    def created(body: Annotated[LiveRunInput, strict_json(LiveRunInput)]) -> LiveRunEntry:
        # A dependency, so that a bad body gets its 422 (or a busy target its 409) as plain JSON.
        try:
            return create(body)
        except InputErrors as exc:
            raise exc.for_body() from None
        except BusyTargets as exc:
            raise HTTPException(409, str(exc)) from None

    def entry_of(run_id: str) -> LiveRunEntry:
        entry = runs.get(run_id)
        if entry is None:
            raise HTTPException(404, f"no live run {run_id!r} (the server keeps the last {KEPT_RUNS})")
        return entry

    def startable(entry: Annotated[LiveRunEntry, Depends(entry_of)]) -> LiveRunEntry:
        if not entry.holds_targets or entry.state is not RunState.CREATED:
            raise HTTPException(409, f"live run {entry.id} is {entry.state.value}; a run is streamed once")
        entry.state = RunState.RUNNING
        return entry

    @api.get("/api/live/targets", summary="The configured live targets and their health")
    async def list_targets() -> list[dict[str, Any]]:
        """Each target's name, whether it answers, its model and GPU cache size (never its URL)."""
        return await probe_all(list(configured.values()))

    @api.post("/api/live/runs", status_code=201, summary="Create a live run")
    def create_run(entry: Annotated[LiveRunEntry, Depends(created)]) -> dict[str, Any]:
        """Reserve the targets and return where to stream the run from and where its records will be."""
        return {
            **entry.summary(), "events": f"/api/live/runs/{entry.id}/events", "records": f"/api/live/runs/{entry.id}/records",
            **kept(entry),
        }

    @api.get("/api/live/runs/{run_id}", summary="A live run's state")
    def run_state(entry: Annotated[LiveRunEntry, Depends(entry_of)]) -> dict[str, Any]:
        return entry.summary()

    @api.get("/api/live/runs/{run_id}/events", response_class=EventSourceResponse, summary="Stream a live run")
    async def run_events(entry: Annotated[LiveRunEntry, Depends(startable)]) -> AsyncIterator[ServerSentEvent]:
        """Starts the run: ``warning``, ``run``, then per request the prediction (``request`` ... ``ttft``) and
        ``measured``; ``pass`` and ``done`` with measured and ``predicted`` summaries; ``error`` if a target fails.
        Closing the stream stops the run; what was measured stays in its records."""

        outcomes: list[Outcome] = []

        def ended(outcome: Outcome) -> None:
            # Either way the run's targets are free again; a run its client left is stopped, not finished.
            entry.state = RunState.STOPPED if outcome == "abandoned" else RunState.FINISHED
            outcomes.append(outcome)

        closed = False
        try:
            async for item in event_stream(kept_events(entry.run.events(), recorders.get(entry.id)), web.streams, on_end=ended):
                yield item
            if (recorder := recorders.pop(entry.id, None)) is not None:
                # Closed on the commit thread before the stream's end reaches the client, who then reads it
                # finished; awaited, so the event loop never waits for SQLite.
                await asyncio.wrap_future(recorder.finish_later(STATUS_OF[outcomes[0]]))
            closed = True
        finally:
            if not closed and (recorder := recorders.pop(entry.id, None)) is not None:
                recorder.finish_later(STATUS_OF[outcomes[0]] if outcomes else "stopped")  # the client left

    @api.get("/api/live/runs/{run_id}/records", summary="A live run's measurement file")
    def run_records(
        entry: Annotated[LiveRunEntry, Depends(entry_of)], format: Literal["csv", "jsonl"] = Query("csv")
    ) -> Response:
        """Every request measured so far, as ``kvscope analyze`` reads it (``target`` is the target's name)."""
        buffer = io.StringIO()
        writer = measurements.MeasurementWriter(buffer, jsonl=format == "jsonl")
        for row in entry.run.measurements:
            writer.append(replace(row, target=row.config))
        media = "application/x-ndjson" if format == "jsonl" else "text/csv"
        headers = {"Content-Disposition": f'attachment; filename="kvscope-live-{entry.id}.{format}"'}
        return Response(buffer.getvalue(), media_type=media, headers=headers)

    # -- the page's live panel ------------------------------------------------

    templates = web.templates

    @api.get("/ui/live/panel", response_class=HTMLResponse, include_in_schema=False)
    def panel(request: Request) -> HTMLResponse:
        return templates.TemplateResponse(request, "live/panel.html", {"live": panel_view(list(configured))})

    @api.get("/ui/live/targets", response_class=HTMLResponse, include_in_schema=False)
    async def targets_rows(request: Request) -> HTMLResponse:
        return templates.TemplateResponse(request, "live/targets.html", {"targets": await probe_all(list(configured.values()))})

    @api.post("/ui/live/run", response_class=HTMLResponse, include_in_schema=False)
    async def start_from_page(request: Request) -> HTMLResponse:
        form = await request.form()
        values: dict[str, Any] = {k: v for k, v in form.items() if isinstance(v, str) and v.strip() and k != "targets"}
        values["targets"] = [v for v in form.getlist("targets") if isinstance(v, str)]
        try:
            # In a thread, as the API's dependency is: opening the kept run is a write, which the loop never waits for.
            entry = await run_in_threadpool(create, LiveRunInput(**values))
        except ValidationError as exc:
            return problem(request, [_say(e) for e in errors_of(exc)])
        except InputErrors as exc:
            return problem(request, [_say(e) for e in exc.errors])
        except BusyTargets as exc:
            return problem(request, [str(exc)], 409)
        return templates.TemplateResponse(request, "live/run.html", {"run": {**run_view(entry), **kept(entry)}})

    def problem(request: Request, messages: list[str], status: int = 422) -> HTMLResponse:
        return templates.TemplateResponse(request, "live/problem.html", {"messages": messages}, status_code=status)

    return api


async def kept_events(events: AsyncIterator[Event], recorder: LiveRecorder | None) -> AsyncIterator[Streamable]:
    """The live run's events, each kept by its recorder too (encoded once for both)."""
    try:
        async for event in events:
            if recorder is None:
                yield event
            else:
                data, text = recorder.add(event)
                yield Encoded(event.kind, text, data)
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()  # a client that left stops the run at once


async def probe_all(targets: list[Target]) -> list[dict[str, Any]]:
    async def one(target: Target) -> dict[str, Any]:
        try:
            async with VllmClient(target, PROBE_TIMEOUT_S) as client:
                return (await client.probe()).to_dict()
        except TargetError as exc:
            return {"name": target.name, "healthy": False, "error": str(exc)}

    return list(await asyncio.gather(*(one(t) for t in targets)))


def panel_view(names: list[str]) -> dict[str, Any]:
    """The live panel's choices; its fields' bounds and defaults are LiveRunInput's (a run is streamed: the stream's
    document limit)."""
    return {
        "targets": names, "presets": {name: DESCRIPTIONS.get(name, "") for name in PRESETS},
        "default_preset": LiveRunInput.model_fields["preset"].default, "model": LiveRunInput, "max_docs": MAX_STREAM_DOCS,
    }


def run_view(entry: LiveRunEntry) -> dict[str, Any]:
    """What the live run's partial needs: targets, request count, pass boundaries, where to stream from."""
    return live_view(
        entry.id, entry.run.scenario, entry.target_names,
        events=f"/api/live/runs/{entry.id}/events", records=f"/api/live/runs/{entry.id}/records",
    )


def live_view(run_id: str | int, scenario: Scenario, targets: list[str], *, events: str, records: str) -> dict[str, Any]:
    """The live run partial's context, for a run under way or a kept one (replayed from its stored events)."""
    marks, first = [], 1
    for number, spec in enumerate(scenario.passes, start=1):
        marks.append({"number": number, "order": spec.label, "first_request": first})
        first += scenario.pass_length(spec)
    return {
        "id": run_id, "targets": targets, "requests": scenario.total_requests, "passes": marks,
        "events": events, "records": records,
    }


def _say(error: dict[str, Any]) -> str:
    where = ".".join(str(p) for p in error.get("loc", ())) or "scenario"
    return f"{where}: {error['msg']}"
