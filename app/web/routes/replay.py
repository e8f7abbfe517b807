"""Trace replay over HTTP: ``POST /api/replay`` and ``POST /api/curve`` on a bundled trace or an upload, ``GET /api/traces``,
and the page's replay panel (``/ui/replay``: the same form, answered with partials under ``templates/replay/``).

Both take a form (``multipart/form-data``, so that a trace file can come
along): the CLI's flags as fields, and either ``trace`` (a bundled trace's
name) or ``file``. The answers are those of ``kvscope replay --json`` and
``kvscope curve --json``. The web's limits are tighter than the CLI's so one
call stays within a few seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any

from fastapi import APIRouter, File, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile as StarletteUpload

from app.runs.recording import keep, result_of, run_headers, save_replay
from app.runs.store import MAX_ID, RunStore, StoreError
from app.scenario_input import ScenarioInput, with_serving
from app.web.context import Web
from app.web.guard import upload_route
from app.web.inputs import InputErrors, check, errors_by_field, errors_of, strict_json, within
from app.web.json_response import JSONResponse
from app.web.panel_input import form_values
from sim.analysis.curve import MAX_CURVE_POINTS, lru_curve, scenario_stream, trace_stream
from sim.bounds.budget import Budget, Cost, OverBudget, block_stream_cost, trace_cost
from sim.sched.replay_serving import ReplayServing
from sim.simulation.replay import (
    MAX_CHUNK_BLOCKS,
    MAX_CPU_BLOCKS,
    MAX_GPU_BLOCKS,
    MAX_TIMELINE_BUCKETS,
    ReplayError,
    ReplayTiers,
    replay,
    storage_tier,
)
from sim.tiers.chunk_store import DEFAULT_CPU_BACKEND, CpuBackend
from sim.traces.reader import (
    BUNDLED_TRACES,
    DEFAULT_TRACE,
    MOONCAKE_BLOCK_TOKENS,
    Trace,
    TraceError,
    TraceLimits,
    bundled_trace_path,
    parse_trace,
    read_trace,
)
from sim.workloads.scenario import Scenario

# About 3 s of replay at the most, and a JSON answer of tens of MB at the most.
WEB_LIMITS = TraceLimits(max_bytes=32 * 2**20, max_requests=50_000, max_blocks=2_000_000)


class TraceForm(BaseModel):
    """Which trace, and how its hash ids map to tokens."""

    model_config = ConfigDict(extra="forbid")

    trace: str = Field(default=DEFAULT_TRACE, description=f"a bundled trace ({', '.join(BUNDLED_TRACES)}); ignored when a file is uploaded")
    block_size: int | None = Field(
        default=None, ge=1, le=65_536,
        description="tokens per hash id (one GPU block each); default: the trace format's (512 Mooncake, 16 Bailian)",
    )
    file: UploadFile | None = Field(
        default=None, description="a Mooncake or Qwen-Bailian JSONL trace (told apart by its first request), instead of a bundled one"
    )


class ReplayForm(TraceForm):
    """``kvscope replay``'s flags."""

    gpu_blocks: int = Field(ge=1, le=MAX_GPU_BLOCKS, description="usable GPU blocks (vLLM's null block comes on top)", examples=[2000])
    cpu_blocks: int | None = Field(
        default=None, ge=1, le=MAX_CPU_BLOCKS, description="add a CPU tier of this many blocks", examples=[20000]
    )
    chunk_blocks: int = Field(default=1, ge=1, le=MAX_CHUNK_BLOCKS, description="blocks per CPU chunk")
    cpu_backend: CpuBackend = Field(
        default=DEFAULT_CPU_BACKEND, description="the CPU tier's rules: lmcache (LMCache's own), brief (the seed's) or vllm-native",
    )
    storage_tiers: str | None = Field(
        default=None, max_length=1000,
        description="tiers behind the CPU, comma-separated, searched in order: NAME:TOKENSt[:POLICY[:LOAD_MS_PER_TOKEN]]",
        examples=["nvme:2000000t:lru:0.01"],
    )
    timeline_buckets: int = Field(default=50, ge=1, le=MAX_TIMELINE_BUCKETS, description="windows of the hit-ratio timeline")


class ReplayInput(with_serving(ReplayForm, ReplayServing)):  # type: ignore[misc]
    """``/api/replay``'s form: ``kvscope replay``'s flags, and how the trace is served (``--timed --speedup 2`` is
    ``timed=true, speedup=2``, ``--max-num-batched-tokens 2048`` is ``max_num_batched_tokens=2048``); none of these:
    one request at a time."""


class CurveForm(TraceForm):
    """``kvscope curve``'s flags for a trace."""

    points: int = Field(default=100, ge=1, le=MAX_CURVE_POINTS, description="capacities, spread evenly up to the distinct blocks")


class ScenarioCurveInput(ScenarioInput):
    """A scenario (as for ``/api/simulate``) whose requests' blocks make the stream."""

    points: int = Field(default=100, ge=1, le=MAX_CURVE_POINTS)


def _invalid(field: str, message: str, value: Any = None) -> RequestValidationError:
    error: dict[str, Any] = {"type": "value_error", "loc": ("body", field), "msg": message}
    if isinstance(value, str | int):
        error["input"] = value
    return RequestValidationError([error])


@lru_cache(maxsize=8)
def _bundled(name: str, block_size: int | None) -> Trace:
    return read_trace(bundled_trace_path(name), block_size, WEB_LIMITS, name=name)


@dataclass(frozen=True, slots=True)
class TraceChoice:
    """What a form chose, read (an upload's bytes travel to the worker process, its file object cannot)."""

    trace: str
    block_size: int | None
    upload: tuple[str, bytes] | None

    @classmethod
    async def of(cls, form: TraceForm, file: Any = None) -> TraceChoice:
        """The form's choice; ``file``: the upload when it came apart from the form (the page's panel)."""
        file = form.file if file is None else file
        upload = (file.filename, await file.read(WEB_LIMITS.max_bytes + 1)) if isinstance(file, StarletteUpload) and file.filename else None
        return cls(form.trace, form.block_size, upload)


def load_trace(choice: TraceChoice) -> Trace:
    """The uploaded file if there is one, else the bundled trace; a bad trace is a 422 naming the line."""
    if choice.upload is not None:
        name, data = choice.upload
        try:
            return parse_trace(data, choice.block_size, WEB_LIMITS, name=name)
        except TraceError as exc:
            raise _invalid("file", f"{name}: {exc}") from None
    if choice.trace not in BUNDLED_TRACES:
        raise _invalid("trace", f"unknown bundled trace; known: {', '.join(BUNDLED_TRACES)}", choice.trace)
    try:
        return _bundled(choice.trace, choice.block_size)
    except TraceError as exc:
        raise _invalid("block_size", f"{choice.trace}: {exc}", choice.block_size) from None


def _within(budget: Budget, cost: Cost, field: str) -> None:
    try:
        budget.check(cost, field, "a smaller trace")
    except OverBudget as exc:
        raise _invalid(exc.field, str(exc)) from None


def replay_tiers(form: ReplayForm) -> ReplayTiers:
    """The form's tiers; a tier behind the CPU it cannot read is refused at its field."""
    try:
        storage = tuple(storage_tier(t) for t in (form.storage_tiers or "").split(",") if t.strip())
    except ReplayError as exc:
        raise _invalid(exc.field, str(exc), form.storage_tiers) from None
    return ReplayTiers(form.gpu_blocks, form.cpu_blocks, form.chunk_blocks, form.cpu_backend, storage)


def replay_answer(
    choice: TraceChoice, tiers: ReplayTiers, timeline_buckets: int, budget: Budget, serving: ReplayServing | None = None
) -> dict[str, Any]:
    """``kvscope replay --json`` of the chosen trace, in a worker: read, estimated, replayed (step by step under vLLM's
    scheduler loop when ``serving`` asks for it, as the CLI's serving flags do)."""
    trace = load_trace(choice)
    _within(budget, trace_cost(len(trace), trace.total_blocks), "file")
    try:
        if serving is not None and serving.stepped:
            from sim.sched.replay import replay_served, served_trace_cost  # the stepped engine, only when asked for

            _within(budget, served_trace_cost(trace, serving), "file")
            try:
                return replay_served(trace, tiers, None, serving, ledger=False)[0]
            except ValueError as exc:  # the stepped engine's refusals (a request larger than the pool, ...)
                if isinstance(exc, ReplayError):
                    raise
                raise RequestValidationError([{"type": "value_error", "loc": ("body",), "msg": str(exc)}]) from None
        return replay(trace, tiers, timeline_buckets=timeline_buckets)
    except ReplayError as exc:
        value = {"gpu_blocks": tiers.gpu_blocks, "cpu_blocks": tiers.cpu_blocks, "chunk_blocks": tiers.chunk_blocks}.get(exc.field)
        raise _invalid(exc.field, str(exc), value) from None


def curve_answer(choice: TraceChoice, points: int, budget: Budget) -> dict[str, Any]:
    """``kvscope curve --json`` of the chosen trace, in a worker."""
    stream = trace_stream(load_trace(choice))
    _within(budget, block_stream_cost(len(stream), points), "file")
    return lru_curve(stream, points)


def scenario_curve_answer(scenario: Scenario, points: int) -> dict[str, Any]:
    return lru_curve(scenario_stream(scenario), points)


def replay_view(result: dict[str, Any]) -> dict[str, Any]:
    """What the page's panel shows of ``kvscope replay --json``: the tier rows, a status line, and what the charts draw."""
    trace = result["trace"]
    keys = ("seq", "timestamp_ms", "ttft_ms", "prompt_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens", "source",
            "disk_hit_tokens")
    return {
        "tiers": result["tiers"],
        "status": f"Replayed {trace['requests']:,} requests ({trace['block_references']:,} block references) of {trace['name']} "
        f"through {result['run']}.",
        "chart": {
            "tiers": result["tiers"],
            "timeline": result["timeline"],
            "requests": [{k: r[k] for k in keys} for r in result["requests"]],
        },
    }


def kept_replay(store: RunStore, run_id: int) -> tuple[dict[str, Any], dict[str, str]] | None:
    """A kept replay's result and the form's values it ran with (what the result says of them), or None when the run
    is not a replay the panel can show."""
    try:
        run = store.get(run_id)
    except StoreError:
        return None
    result = result_of(store, run)
    if run.info.kind != "replay" or not isinstance(result, dict) or not all(k in result for k in ("trace", "run", "tiers", "timeline", "requests")):
        return None
    trace = result["trace"]
    capacity = {t["name"]: t.get("capacity_blocks") for t in result["tiers"]}
    values = {"gpu_blocks": capacity.get("gpu"), "cpu_blocks": capacity.get("cpu"), "block_size": trace.get("block_tokens"),
              "timeline_buckets": len(result["timeline"]) or None, "trace": trace.get("name")}
    return result, {k: str(v) for k, v in values.items() if v is not None}


def router(*, web: Web) -> APIRouter:
    api = APIRouter(tags=["traces"])
    budget = web.workers.budget.per_request

    def render(request: Request, name: str, status_code: int = 200, headers: dict[str, str] | None = None, **context: Any) -> HTMLResponse:
        return web.templates.TemplateResponse(request, name, context, status_code=status_code, headers=headers)

    @api.get("/ui/replay", response_class=HTMLResponse, include_in_schema=False)
    def panel(request: Request, run: int | None = Query(None, ge=1, le=MAX_ID)) -> HTMLResponse:
        """The page's trace-replay panel (the dashboard loads it after the page); with ``run``, a kept replay shown
        as it ran, from its stored result (nothing replayed again)."""
        kept_run = kept_replay(web.runs, run) if run is not None else None
        if kept_run is None:
            return render(request, "replay/panel.html", traces=traces(), form_model=ReplayForm, values=None, errors={})
        result, values = kept_run
        view = replay_view(result)
        view["status"] = f"Kept run {run}, as it ran (nothing replayed again): {view['status'][:1].lower()}{view['status'][1:]}"
        return render(request, "replay/panel.html", traces=traces(), form_model=ReplayForm, values=values, errors={},
                      kept={"view": view, "run_id": run})

    @api.post("/ui/replay", response_class=HTMLResponse, include_in_schema=False)
    @upload_route
    async def panel_replay(request: Request) -> HTMLResponse:
        """The panel's answer: the tier table and the charts' data; on bad input, 422 and the fields redrawn with
        their errors (morphed, so the focus and a chosen file stay)."""
        form = await request.form()
        values = form_values(form)
        given = {k: values[k].strip() for k in ReplayForm.model_fields if k != "file" and values.get(k, "").strip()}
        try:
            try:
                fields = ReplayForm(**given)
            except ValidationError as exc:  # the field named in its words, as the CLI names its flag
                raise RequestValidationError([{**e, "msg": f"{e['loc'][0]}: {e['msg']}"} for e in errors_of(exc)]) from None
            choice = await TraceChoice.of(fields, form.get("file"))
            tiers = replay_tiers(fields)
            result = await web.workers.run(replay_answer, choice, tiers, fields.timeline_buckets, budget)
        except RequestValidationError as exc:
            return render(
                request, "replay/fields.html", status_code=422, traces=traces(), form_model=ReplayForm, values=values,
                errors=errors_by_field(list(exc.errors()), ReplayForm.model_fields), headers={"HX-Retarget": "#replay-fields", "HX-Reswap": "outerMorph"},
            )

        def answer() -> HTMLResponse:  # kept and rendered (thousands of requests' chart data) off the event loop
            run_id, _ = kept(result, choice)
            return render(
                request, "replay/result.html", view=replay_view(result), run_id=run_id,
                traces=traces(), form_model=ReplayForm, values=values, errors={},
            )

        return await run_in_threadpool(answer)

    def kept(result: dict[str, Any], choice: TraceChoice) -> tuple[int | None, str | None]:
        """The replay kept as a run (an upload with it); never fails the answer."""
        files = [choice.upload] if choice.upload is not None else []
        return keep(lambda: save_replay(web.runs, result, files))

    @api.get("/api/traces", summary="The bundled traces")
    def traces() -> list[dict[str, Any]]:
        """Each bundled trace's name and summary (requests, block references, distinct blocks, sha256)."""
        return [_bundled(name, MOONCAKE_BLOCK_TOKENS).summary() for name in BUNDLED_TRACES]

    @api.post("/api/replay", summary="Replay a trace through the tiers", response_class=JSONResponse)
    @upload_route
    # File(), not Form(): the form may carry a trace file, so its OpenAPI body is multipart, not urlencoded.
    async def replay_route(form: Annotated[ReplayInput, File()]) -> JSONResponse:
        """The same JSON as ``kvscope replay TRACE --json`` with the same flags: ``trace``, ``run``, ``tiers`` (each
        with ``lookup_blocks``, ``hit_blocks``, ``hit_ratio``), per-request ``requests``, ``totals`` and ``timeline``.
        Served under load (``timed``, ``concurrency``, ``rate`` or a scheduler field such as ``max_num_seqs``), it is
        ``kvscope replay TRACE --timed --json``'s: per-request times, the run's ``serving`` settings and ``summary``.
        The ``X-Kvscope-Run`` header names the run kept of it."""
        try:
            serving = form.serving()
        except ValidationError as exc:
            raise InputErrors(errors_of(exc)).for_body() from None
        tiers = replay_tiers(form)
        choice = await TraceChoice.of(form)
        result = await web.workers.run(replay_answer, choice, tiers, form.timeline_buckets, budget, serving)

        def answer() -> JSONResponse:  # kept and rendered off the event loop
            return JSONResponse(result, headers=run_headers(*kept(result, choice)))

        return await run_in_threadpool(answer)

    @api.post("/api/curve", summary="Plain-LRU hit-ratio curve of a trace", response_class=JSONResponse)
    @upload_route
    async def curve_route(form: Annotated[CurveForm, File()]) -> JSONResponse:
        """``references``, ``distinct_blocks``, ``max_hit_ratio`` and ``points`` (``kvscope curve TRACE --json``'s list)."""
        return await web.workers.run_json(curve_answer, await TraceChoice.of(form), form.points, budget)

    @api.post("/api/curve/scenario", summary="Plain-LRU hit-ratio curve of a scenario's blocks", response_class=JSONResponse)
    async def scenario_curve_route(body: Annotated[ScenarioCurveInput, strict_json(ScenarioCurveInput)]) -> JSONResponse:
        """The curve of the full blocks of the scenario's requests, in request order (``kvscope curve`` without TRACE)."""
        try:
            scenario = check(body)
            within(budget, block_stream_cost(scenario.total_blocks, body.points), "points", "fewer points or a smaller scenario")
        except InputErrors as exc:
            raise exc.for_body() from None
        return await web.workers.run_json(scenario_curve_answer, scenario, body.points)

    return api
