"""``GET /healthz``: liveness for the container's health check, with the SSE stream and worker counters."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from fastapi import APIRouter

from app.web.context import Web


def router(*, web: Web) -> APIRouter:
    api = APIRouter(tags=["health"])

    @api.get("/healthz", summary="Liveness, stream and worker counters")
    async def healthz() -> dict[str, Any]:
        """``streams.open`` counts step streams still being served; it drops as soon as a client disconnects.
        ``work`` counts the heavy calls (``running`` includes those waiting for a worker). On the event loop, never
        behind a simulation: it answers in milliseconds whatever runs."""
        return {"status": "ok", "version": version("kvscope"), "streams": web.streams.to_dict(), "work": web.workers.stats.to_dict()}

    return api
