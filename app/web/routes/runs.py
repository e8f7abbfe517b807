"""Kept runs over HTTP and on the page: list, one run, its stored step stream, compare two, export, delete, import.

API: ``GET /api/runs``, ``GET /api/runs/{id}``, ``GET /api/runs/{id}/events``
(the run's stored events as SSE, the page's player replays them),
``GET /api/runs/{id}/export?format=csv|jsonl|json``, ``GET /api/runs/{a}/diff/{b}``,
``DELETE /api/runs/{id}``, ``POST /api/runs/import`` (a file). Ids are
positive integers, checked by FastAPI before any query (422 otherwise).
The page's Runs area uses the ``/ui/runs`` partials.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from starlette.datastructures import UploadFile as StarletteUpload

from app.runs import compare, export, recording
from app.runs.store import KINDS, MAX_ID, MAX_LIST, NoSuchRun, StoreError, StoreFull
from app.runs.watch_replay import watch_events
from app.web.context import Web
from app.web.guard import upload_route
from app.web.imports import import_upload
from app.web.json_response import JSONResponse
from app.web.panel_input import Problem
from app.web.sse import OpenStreams, event_stream, open_streams

RunId = Annotated[int, Path(ge=1, le=MAX_ID, description="a run's id, as /api/runs lists it")]
PAGE_RUNS = 50  # runs the page lists


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event read back from the runs database: the JSON the stream sent, sent again."""

    data: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.data.get("type", "event"))

    def to_dict(self) -> dict[str, Any]:
        return self.data


def existing_run(run_id: RunId, request: Request) -> int:
    """A dependency: a stream's 404 must go out before its 200 does."""
    try:
        request.app.state.web.runs.get(run_id)
    except NoSuchRun as exc:
        raise HTTPException(404, str(exc)) from None
    return run_id


def stored_events(web: Web, run_id: int) -> Iterator[StoredEvent]:
    """The run's step events as they were sent, or, for a run kept without them, those its result determines."""
    batches = web.runs.events(run_id)
    if not batches:
        run = web.runs.get(run_id)
        result = run.result
        if run.info.kind == "watch":  # kept as its KV event recording: converted as the live watch converts them
            batches = watch_events(web.runs.records(run_id))
        else:
            batches = recording.events_from_result(result) if isinstance(result, dict) and "runs" in result else []
    for batch in batches:
        for event in batch:
            yield StoredEvent(event)


def router(*, web: Web) -> APIRouter:
    api = APIRouter(tags=["runs"])
    store = web.runs

    def get_or_404(run_id: int) -> Any:
        try:
            return store.get(run_id)
        except NoSuchRun as exc:
            raise HTTPException(404, str(exc)) from None

    @api.get("/api/runs", summary="The kept runs, newest first")
    def list_runs(
        limit: int = Query(100, ge=1, le=MAX_LIST, description="runs to list"),
        kind: str | None = Query(None, description=f"only runs of this kind: {', '.join(KINDS)}"),
        before: int | None = Query(None, ge=1, le=MAX_ID, description="only runs with a smaller id (the next page)"),
    ) -> Response:
        """Each run's id, kind, name, status, when, its summary (scenario and headline figures) and counts."""
        if kind is not None and kind not in KINDS:
            raise RequestValidationError([{"type": "enum", "loc": ("query", "kind"), "msg": f"must be one of {', '.join(KINDS)}"}])
        return Response(store.list_json(limit=limit, kind=kind, before=before), media_type="application/json")

    @api.get("/api/runs/{run_id}", summary="One kept run")
    def get_run(run_id: RunId) -> dict[str, Any]:
        """The run with its scenario, cost constants, source, uploads (each file's sha256, size, whether its content
        was kept) and result (a streamed simulation's rebuilt from its events); its requests are at ``/export``."""
        with store.snapshot():  # the run, its result and its uploads as of one moment
            run = get_or_404(run_id)
            return {**run.to_dict(), "result": recording.result_of(store, run), "uploads": store.uploads(run_id), "url": f"/?run={run_id}"}

    @api.get("/api/runs/{run_id}/events", response_class=EventSourceResponse, summary="A kept run's step events")
    async def run_events(
        run_id: Annotated[int, Depends(existing_run)], opened: Annotated[OpenStreams, Depends(open_streams)]
    ) -> AsyncIterator[ServerSentEvent]:
        """The events the run's stream sent, in order, as SSE (as fast as the client reads)."""
        async for item in opened.closing(event_stream(stored_events(web, run_id), web.streams)):
            yield item

    @api.get("/api/runs/{run_id}/export", summary="Export a kept run")
    def export_run(run_id: RunId, format: export.Format = Query("csv")) -> Response:
        """``csv`` or ``jsonl``: its requests as a measurement file (``kvscope analyze`` reads it);
        ``json``: the whole run, which ``/api/runs/import`` takes back."""
        headers = {"Content-Disposition": f'attachment; filename="{export.filename(run_id, format)}"'}
        try:
            text = export.export(store, run_id, format)  # looks the run up itself, in one snapshot with the rest
        except NoSuchRun as exc:
            raise HTTPException(404, str(exc)) from None
        except export.NotExportable as exc:
            raise _invalid("format", str(exc), "query") from None
        return Response(text, media_type=export.MEDIA[format], headers=headers)

    @api.get("/api/runs/{a}/diff/{b}", summary="Compare two kept runs")
    def diff_runs(a: RunId, b: RunId) -> dict[str, Any]:
        """Scenario fields and cost constants that differ, and per (configuration, pass) both runs' figures
        with the change (``b / a``) and whether it differs; ``ttft`` holds each run's per-request series."""
        try:
            return compare.diff(store, a, b)  # looks both runs up itself, in one snapshot with the rest
        except NoSuchRun as exc:
            raise HTTPException(404, str(exc)) from None
        except compare.NotComparable as exc:
            raise _invalid(exc.field, str(exc), "path") from None

    @api.delete("/api/runs/{run_id}", status_code=204, summary="Delete a kept run")
    def delete_run(run_id: RunId) -> Response:
        if not store.delete(run_id):
            raise HTTPException(404, f"no run {run_id}")
        return Response(status_code=204)

    @api.post("/api/runs/import", status_code=201, summary="Import a file as a run")
    @upload_route
    async def import_run(file: UploadFile) -> JSONResponse:
        """A measurement file (CSV or JSONL), ``kvscope simulate --json`` output, or a run exported as JSON; read in
        the server's workers as a simulation is (503 when they are busy, or past the import deadline)."""
        try:
            run_id = await import_upload(web, file)
        except Problem as exc:
            raise exc.for_body() from None
        except StoreFull as exc:
            raise HTTPException(507, str(exc)) from None
        return JSONResponse({"id": run_id, "url": f"/?run={run_id}"}, status_code=201)

    # -- the page's Runs area -------------------------------------------------------

    templates = web.templates

    def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, context, status_code=status_code)

    @api.get("/ui/runs", response_class=HTMLResponse, include_in_schema=False)
    def runs_list(request: Request) -> HTMLResponse:
        return render(request, "runs/list.html", runs=store.list(limit=PAGE_RUNS), total=store.count())

    @api.get("/ui/runs/compare", response_class=HTMLResponse, include_in_schema=False)
    def runs_compare(
        request: Request,
        a: int | None = Query(None, ge=1, le=MAX_ID),
        b: int | None = Query(None, ge=1, le=MAX_ID),
        pick: list[int] = Query([], max_length=2),
    ) -> HTMLResponse:
        """Two runs compared (``a`` and ``b``, or the two ``pick``ed, older first), or with ``a`` alone that run's
        own figures: the detail of a run the lanes cannot play."""
        if pick:
            if len(pick) != 2:
                return render(request, "runs/problem.html", status_code=422, message="pick: pick two runs to compare")
            a, b = sorted(pick)
        if a is None:
            return render(request, "runs/problem.html", status_code=422, message="a: name a run")
        try:
            view = compare.diff(store, a, b if b is not None else a)
        except NoSuchRun as exc:
            return render(request, "runs/problem.html", status_code=404, message=str(exc))
        except compare.NotComparable as exc:
            return render(request, "runs/problem.html", status_code=422, message=str(exc))
        return render(request, "runs/compare.html", diff=view, single=b is None,
                      without_scenario=compare.without_scenario_text(view), nothing_in_common=compare.NOTHING_IN_COMMON)

    @api.post("/ui/runs/import", response_class=HTMLResponse, include_in_schema=False)
    @upload_route
    async def runs_import(request: Request) -> HTMLResponse:
        form = await request.form()
        upload = form.get("file")
        problem = None
        if not isinstance(upload, StarletteUpload) or not upload.filename:
            problem = "file: choose a file to import"
        else:
            try:
                await import_upload(web, upload)
            except (Problem, StoreError) as exc:
                problem = f"file: {exc}"
        return render(request, "runs/list.html", status_code=422 if problem else 200, problem=problem,
                      runs=store.list(limit=PAGE_RUNS), total=store.count())

    @api.delete("/ui/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
    def runs_delete(request: Request, run_id: RunId) -> HTMLResponse:
        try:
            store.delete(run_id)
        except StoreError as exc:
            return render(request, "runs/problem.html", status_code=500, message=str(exc))
        return runs_list(request)

    return api


def _invalid(field: str, message: str, where: str = "body") -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": (where, field), "msg": message}])
