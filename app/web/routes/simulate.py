"""The simulation API: ``POST /api/simulate`` (the ``simulate --json`` result), its SSE step stream, and the presets.

Both keep the run in the runs database and name it in the ``X-Kvscope-Run``
header; the stream keeps each request's events as they are sent. Both simulate
in the web's worker pool (``app.web.workers``), never on the event loop that
serves ``/healthz`` and the open streams: the stream's events are made there,
within the budget and deadline, before its first message; the loop only sends them.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from app.runs.recording import RUN_HEADER, StreamRecorder, encoded, keep, run_headers, save_simulation
from app.runs.store import StoreError
from app.scenario_input import ScenarioInput, SimulateInput
from app.web.context import Web
from app.web.inputs import InputErrors, StreamInput, check, errors_of, strict_json, within
from app.web.json_response import JSONResponse
from app.web.sse import REQUEST_END, Encoded, OpenStreams, Outcome, Streamable, StreamStats, event_stream, open_streams
from sim.bounds.budget import OverBudget
from sim.engine.events import Event, RunWarning
from sim.sched.limit import step_limit
from sim.sched.serving import Serving
from sim.sched.simulate import refusal, served_result, stepped_cost
from sim.sched.stream import STEP_END, stepped_stream
from sim.simulation.run import simulate, stream
from sim.workloads.estimate import simulation_cost
from sim.workloads.presets import DESCRIPTIONS, PRESETS
from sim.workloads.scenario import Scenario

STATUS_OF: dict[Outcome, str] = {"completed": "done", "abandoned": "stopped", "failed": "failed"}


@dataclass(frozen=True, slots=True)
class StreamJob:
    scenario: Scenario
    pace_s: float
    events: list[bytes]  # every event of the run, made and encoded in a worker process (stream_events)
    serving: Serving | None = None  # served under load: the stepped engine's stream (stepped_events)


@dataclass(frozen=True, slots=True)
class KeptStream:
    """A stream to send and the run that keeps it (None, and why, when it cannot be kept)."""

    job: StreamJob
    recorder: StreamRecorder | None
    problem: str | None


def scenario_of(body: Annotated[ScenarioInput, strict_json(ScenarioInput)]) -> Scenario:
    try:
        return check(body)
    except InputErrors as exc:
        raise exc.for_body() from None


def served_of(body: Annotated[SimulateInput, strict_json(SimulateInput)]) -> tuple[Scenario, Serving]:
    """The body's scenario and how it is served (422 naming the fields when they do not combine)."""
    scenario = scenario_of(body)
    try:
        return scenario, serving_of(body, scenario)
    except InputErrors as exc:
        raise exc.for_body() from None


def serving_of(body: SimulateInput | StreamInput, scenario: Scenario) -> Serving:
    """How the body's scenario is served; raises ``InputErrors`` naming the fields when they do not combine, or
    when the stepped engine cannot serve the scenario."""
    try:
        serving: Serving = body.serving()
    except ValidationError as exc:
        raise InputErrors(errors_of(exc)) from None
    if serving.stepped and (refused := refusal(scenario, serving)) is not None:
        raise InputErrors([{"type": "value_error", "loc": (refused[0],), "msg": refused[1]}])
    return serving


def stream_events(scenario: Scenario, explain: bool, serving: Serving | None = None) -> list[bytes]:
    """Every event of the step stream (in a worker process) as its kind and JSON text (``encoded``: what the SSE
    message sends and the kept run stores, so the event loop encodes nothing), pickled a request's events (or, served
    under load, a scheduler step's) at a time: a paced stream holds them for as long as it is open, a few MB at the
    stream's limits, not the ~10 MB of the events themselves."""
    if serving is not None and serving.stepped:
        return stepped_events(scenario, serving)
    return _batched(stream(scenario, explain=explain), REQUEST_END)


def stepped_events(scenario: Scenario, serving: Serving) -> list[bytes]:
    """``stream_events`` for a scenario served under load (``sim.sched.stream``), pickled a scheduler step at a time."""
    return _batched(stepped_stream(scenario, serving), STEP_END)


def _batched(events: Iterable[Event], ends_with: str) -> list[bytes]:
    batches: list[bytes] = []
    batch: list[tuple[str, str]] = []
    for event in events:
        batch.append((event.kind, encoded(event)[1]))
        if event.kind == ends_with:
            batches.append(pickle.dumps(batch))
            batch = []
    if batch:
        batches.append(pickle.dumps(batch))
    return batches


def unpickled(batches: list[bytes]) -> Iterator[Encoded]:
    """The events again, a request's at a time, as the stream sends them (pickled by this server's own worker)."""
    for batch in batches:
        for kind, text in pickle.loads(batch):  # noqa: S301 - made by stream_events in this server's worker
            yield Encoded(kind, text)


async def stream_job_of(
    body: Annotated[StreamInput, strict_json(StreamInput)],
    request: Request,
    explain: Annotated[bool, Query(description="send each request's misses by cause (explain)")] = True,
) -> StreamJob:
    # A dependency, so that a bad body (422), a run over the budget (422) and a busy server (503 + Retry-After)
    # are answered before the stream's 200 starts.
    try:
        scenario = check(body, streamed=True)
        serving = serving_of(body, scenario)
    except InputErrors as exc:
        raise exc.for_body() from None
    return await simulated_job(request, scenario, body.pace_ms / 1000, explain, serving)


async def simulated_job(
    request: Request, scenario: Scenario, pace_s: float, explain: bool = True, serving: Serving | None = None
) -> StreamJob:
    """A checked scenario's stream, simulated in the worker pool within the per-request budget (422 over it);
    served step by step when ``serving`` asks for it."""
    workers = request.app.state.web.workers
    stepped = serving if serving is not None and serving.stepped else None
    try:
        within(workers.budget.per_request, stepped_cost(scenario, stepped) if stepped else simulation_cost(scenario, explain=explain))
    except InputErrors as exc:
        raise exc.for_body() from None
    return StreamJob(scenario, pace_s, await workers.run(stream_events, scenario, explain, stepped), stepped)


def kept_stream(job: Annotated[StreamJob, Depends(stream_job_of)], request: Request, response: Response) -> KeptStream:
    """A dependency too: the run is opened, and named in a header, before the stream's headers go out."""
    try:
        recorder = StreamRecorder(request.app.state.web.runs, job.scenario, serving=job.serving)
    except StoreError as exc:
        return KeptStream(job, None, str(exc))
    response.headers[RUN_HEADER] = str(recorder.run_id)
    return KeptStream(job, recorder, None)


async def recorded(events: Iterator[Encoded], recorder: StreamRecorder | None, problem: str | None) -> AsyncIterator[Streamable]:
    """The events, each also kept by the recorder (the same text); first a warning if the run cannot be kept."""
    if problem:
        yield RunWarning("", f"this run is not kept: {problem}")
    for event in events:
        if recorder is not None:
            recorder.add_text(event.kind, event.text)
        yield event
    if recorder is not None:
        # Its last batches' commits, which may fail after they were sent: awaited, the loop never waits for SQLite.
        await asyncio.wrap_future(recorder.settled())
    if recorder is not None and recorder.problem:
        yield RunWarning("", f"the run is kept only up to here: {recorder.problem}")


async def send(kept: KeptStream, streams: StreamStats) -> AsyncIterator[ServerSentEvent]:
    """A kept stream's messages: the simulation's events, recorded as they go, the run closed when it ends."""
    recorder = kept.recorder
    ended: list[Outcome] = []
    closed = False
    events = recorded(unpickled(kept.job.events), recorder, kept.problem)
    try:
        # Closed with this generator (aclosing), so that closing it ends the stream's count and run at once.
        async with aclosing(event_stream(events, streams, pace_s=kept.job.pace_s, on_end=ended.append)) as messages:
            async for item in messages:
                yield item
        if recorder is not None:  # closed before the stream's end reaches the client, who then reads it finished
            await asyncio.wrap_future(recorder.finish_later(STATUS_OF[ended[0]]))
        closed = True
    finally:
        if recorder is not None and not closed:  # the client left: the run is closed, and nobody waits for it
            recorder.finish_later(STATUS_OF[ended[0]] if ended else "stopped")


def router(*, web: Web) -> APIRouter:
    api = APIRouter(prefix="/api", tags=["simulate"])

    @api.post("/simulate", summary="Simulate a scenario", response_class=JSONResponse)
    async def simulate_route(
        served: Annotated[tuple[Scenario, Serving], Depends(served_of)],
        explain: Annotated[bool, Query(description="each miss's cause (gpu_miss, computed); false is --no-explain")] = True,
    ) -> JSONResponse:
        """The same JSON as ``kvscope simulate --json`` with the same flags: ``{"docs": 20}`` is ``--docs 20``,
        ``{"concurrency": 4, "max_num_batched_tokens": 2048}`` is ``--concurrency 4 --max-num-batched-tokens 2048``
        (vLLM's scheduler loop; its misses are not explained).
        The ``X-Kvscope-Run`` header names the run kept of it (``X-Kvscope-Run-Error`` says why none was).
        A scenario whose estimated work, memory or answer exceeds the server's budget is a 422 naming the limit;
        a busy server or a run past its deadline answers 503."""
        scenario, serving = served
        cost = stepped_cost(scenario, serving) if serving.stepped else simulation_cost(scenario, explain=explain)
        try:
            within(web.workers.budget.per_request, cost)
        except InputErrors as exc:
            raise exc.for_body() from None
        if serving.stepped:
            limit = step_limit(web.workers.budget.per_request.work_steps, serving)
            try:
                result = await web.workers.run(served_result, scenario, serving, limit)
            except OverBudget as exc:  # a run under load past the work budget as it went: its message names the rate
                raise InputErrors([{"type": "value_error", "loc": (exc.field,), "msg": str(exc)}]).for_body() from None
        else:
            result = await web.workers.run(simulate, scenario, explain)

        def answer() -> JSONResponse:  # kept and rendered off the event loop: /healthz must not wait for it
            return JSONResponse(result, headers=run_headers(*keep(lambda: save_simulation(web.runs, scenario, result))))

        return await run_in_threadpool(answer)

    @api.post("/simulate/stream", summary="Stream a simulation step by step", response_class=EventSourceResponse)
    async def simulate_stream(
        kept: Annotated[KeptStream, Depends(kept_stream)], opened: Annotated[OpenStreams, Depends(open_streams)]
    ) -> AsyncIterator[ServerSentEvent]:
        """One SSE message per core event (``run``, ``request``, ``lookup``, ``evict``, ``load``, ``store``,
        ``occupancy``, ``explain``, ``ttft``, ``pass``, ``done``; ``error`` on failure), runs interleaved request
        by request. With ``/api/simulate``'s serving fields (``concurrency``, ``rate``, vLLM's scheduler flags),
        requests overlap under vLLM's scheduler loop and each run sends ``run``, then per step the ``request`` of
        each arrival, a ``step`` (the step ledger's line) and the ``ttft`` of each request finished in it, then
        ``pass`` and ``done``; runs interleaved step by step. The message's ``event`` is the kind and its ``data`` the event as JSON. The run is simulated
        first (within the server's budget: over it 422, busy or past the deadline 503); disconnecting stops the
        sending and the keeping. The run is kept as it streams; ``X-Kvscope-Run`` is its id (a ``warning`` message first if it
        cannot be)."""
        async for item in opened.closing(send(kept, web.streams)):
            yield item

    @api.get("/presets", summary="The named starting points")
    def presets() -> list[dict[str, Any]]:
        """Each preset's name, one-line description and fields (any of which a body may override)."""
        return [{"name": name, "description": DESCRIPTIONS.get(name, ""), "fields": fields} for name, fields in PRESETS.items()]

    return api
