"""Watch mode on the web: the OpenAI proxy to the upstreams named at start-up, and each upstream's watch.

Proxy: ``POST /v1/completions``, ``POST /v1/chat/completions`` and ``GET
/v1/models`` (watched), ``POST /tokenize`` and ``POST /detokenize`` (forwarded
only) go to the first upstream, ``/upstream/{name}/...`` to the one named;
bodies and answers pass unchanged (app.proxy.forward); any other ``/v1/`` path
is refused, naming it. Watch: ``GET
/api/watch`` lists the upstreams, ``GET /api/watch/{name}`` is one's state
(app.proxy.watch), ``GET /api/watch/{name}/stream`` its events as SSE, in the
simulator's vocabulary (``store``, ``evict``, ``occupancy``, ``measured``,
``ttft`` for the twin's prediction, ``divergence``, ``warning``), the recent
ones first. ``GET /ui/watch/panel`` is the page's panel (static/js/watch.js).
Without upstreams only ``GET /api/watch`` exists (an empty list).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
import httpx
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.sse import EventSourceResponse

from app.proxy.forward import error_response
from app.proxy.upstreams import configured_timeout, configured_upstreams
from app.proxy.watch import UpstreamWatch
from app.runs.recording import ProxyRecorder
from app.web.context import Web
from app.web.proxied import Proxied
from app.web.sse import OpenStreams, event_stream, open_streams
from sim.engine.events import Event

CONNECT_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 30.0
# Events a new stream starts with, so a page opened mid-run sees the present at once.
STREAM_BACKLOG = 500
STREAM_POLL_S = 0.1
ALL_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
PROXIED = (("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"))
# Forwarded but not watched: vLLM's tokenizer endpoints (api_server.py's /tokenize and /detokenize), which clients
# such as benchmark scripts call around their completions; they neither use nor change the cache.
PASSED = (("POST", "/tokenize"), ("POST", "/detokenize"))
FORWARDED_TEXT = ", ".join(f"{m} {p}" for m, p in PROXIED + PASSED)


def router(*, web: Web) -> APIRouter:
    upstreams = configured_upstreams()
    watches = {u.name: UpstreamWatch(u) for u in upstreams}
    # Each upstream's proxied requests and events are kept as a run (opened on its first event).
    recorders = [ProxyRecorder(web.runs, u.name, {"kv_events": u.kv_events is not None}) for u in upstreams]
    for watch, recorder in zip(watches.values(), recorders, strict=True):
        watch.listeners.append(recorder.add)
        watch.kept = recorder.kept
    # One client for every proxied request: its pool keeps HTTP/1.1 connections to the upstreams alive between them.
    timeout = httpx.Timeout(connect=CONNECT_TIMEOUT_S, read=configured_timeout(), write=WRITE_TIMEOUT_S, pool=WRITE_TIMEOUT_S)
    client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        for watch in watches.values():
            watch.prepare()  # the probes start now, not on the first proxied request
        yield
        # At shutdown: the subscriber threads stop and the upstream connections close.
        for watch in watches.values():
            watch.stop_preparing()
            await anyio.to_thread.run_sync(watch.close)
        for recorder in recorders:
            await anyio.to_thread.run_sync(recorder.finish)
        await client.aclose()

    api = APIRouter(tags=["watch"], lifespan=lifespan)

    @api.get("/api/watch", summary="Upstreams being watched")
    def watch_list() -> list[dict[str, Any]]:
        return [{"name": u.name, "kv_events": u.kv_events is not None} for u in upstreams]

    @api.get("/ui/watch/panel", response_class=HTMLResponse, include_in_schema=False)
    def watch_panel(request: Request) -> HTMLResponse:
        return web.templates.TemplateResponse(request, "watch/panel.html", {"upstreams": watch_list()})

    if not upstreams:
        return api

    def watch_of(name: str) -> UpstreamWatch:
        watch = watches.get(name)
        if watch is None:
            raise HTTPException(404, f"no upstream named {name!r} (configured: {', '.join(watches)})")
        return watch

    for (method, path), watched in [(k, True) for k in PROXIED] + [(k, False) for k in PASSED]:
        endpoint = Proxied(path, client, watches, watched=watched)
        web.proxied[(method, path)] = endpoint
        api.add_route(path, endpoint, methods=[method], include_in_schema=False)
        api.add_route("/upstream/{name}" + path, endpoint, methods=[method], include_in_schema=False)

    async def not_forwarded(request: Request) -> Response:
        """Any other vLLM path a client calls: refused, naming it and what is forwarded (never a bare 404)."""
        message = f"kvscope's proxy does not forward {request.method} {request.url.path}; it forwards {FORWARDED_TEXT}"
        return error_response(404, message, "NotFoundError")

    for prefix in ("", "/upstream/{name}"):
        api.add_route(prefix + "/v1/{rest:path}", not_forwarded, methods=list(ALL_METHODS), include_in_schema=False)

    @api.get("/api/watch/{name}", summary="One upstream's tiers, its twin, its proxied requests")
    async def watch_state(name: str) -> dict[str, Any]:
        return await watch_of(name).snapshot()

    @api.get("/api/watch/{name}/stream", response_class=EventSourceResponse, summary="One upstream's events, live")
    async def watch_stream(name: str, opened: Annotated[OpenStreams, Depends(open_streams)]) -> AsyncIterator[Any]:
        watch = watch_of(name)
        async for message in opened.closing(event_stream(_follow(watch), web.streams)):
            yield message

    return api


async def _follow(watch: UpstreamWatch) -> AsyncIterator[Event]:
    """The last ``STREAM_BACKLOG`` events, then each new one as it comes (until the client leaves)."""
    recent = watch.events_after(-1)[-STREAM_BACKLOG:]
    last = recent[-1][0] if recent else -1
    for _, event in recent:
        yield event
    while True:
        await anyio.sleep(STREAM_POLL_S)
        for last, event in watch.events_after(last):
            yield event
