"""How errors are answered: a 422 that repeats at most a little of the input, and 503 for a busy or stopped worker.

FastAPI's own 422 repeats each bad value whole (a 100 MB body came back as a
100 MB reply) and fails on a value JSON cannot carry (``NaN``); here each
error keeps its location, message and type, and the input only when it is a
short string or a finite number. Page routes (``/ui/``) get the message as a
small HTML fragment, API routes as JSON.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from markupsafe import escape

from app.web.json_response import JSONResponse
from app.web.workers import Busy, TimedOut

MAX_ECHO_CHARS = 200  # of a bad input, a message, a location part


def _short(text: str) -> str:
    return text if len(text) <= MAX_ECHO_CHARS else text[:MAX_ECHO_CHARS] + f"... ({len(text):,} characters)"


def safe_error(error: dict[str, Any]) -> dict[str, Any]:
    """An error as the client sees it: location, message, type, and the input only if it is small and JSON."""
    out: dict[str, Any] = {
        "type": str(error.get("type", "value_error")),
        "loc": [part if isinstance(part, int) else _short(str(part)) for part in error.get("loc", ())][:20],
        "msg": _short(str(error.get("msg", "")).removeprefix("Value error, ")),
    }
    value = error.get("input")
    if isinstance(value, bool | int) and abs(value) < 10**18 or isinstance(value, float) and math.isfinite(value):
        out["input"] = value
    elif isinstance(value, str) and len(value) <= MAX_ECHO_CHARS:
        out["input"] = value
    return out


def _is_page(request: Request) -> bool:
    return request.url.path.startswith("/ui/")


def _unavailable(request: Request, message: str, retry_after_s: int) -> Response:
    headers = {"Retry-After": str(retry_after_s)}
    if _is_page(request):
        return HTMLResponse(f'<p class="error" role="alert">{escape(message)}</p>', status_code=503, headers=headers)
    return JSONResponse({"detail": message}, status_code=503, headers=headers)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        return JSONResponse({"detail": [safe_error(e) for e in errors[:50]]}, status_code=422)

    @app.exception_handler(Busy)
    async def busy(request: Request, exc: Busy) -> Response:
        return _unavailable(request, str(exc), exc.retry_after_s)

    @app.exception_handler(TimedOut)
    async def timed_out(request: Request, exc: TimedOut) -> Response:
        return _unavailable(request, str(exc), 1)
