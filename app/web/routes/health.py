"""``GET /healthz``: liveness for the container's health check, with the SSE stream counters."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from fastapi import APIRouter

from app.web.context import Web


def router(*, web: Web) -> APIRouter:
    api = APIRouter(tags=["health"])

    @api.get("/healthz", summary="Liveness and stream counters")
    def healthz() -> dict[str, Any]:
        """``streams.open`` counts step streams still being served; it drops as soon as a client disconnects."""
        return {"status": "ok", "version": version("kvscope"), "streams": web.streams.to_dict()}

    return api
