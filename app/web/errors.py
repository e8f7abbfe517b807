"""How errors are answered: a 422 that repeats at most a little of the input, and 503 for a busy or stopped worker.

A body that cannot be read (not UTF-8, a number of more digits than Python converts, a form without its multipart
boundary or with more fields than the limit) is a 422 at ``body`` saying which, where the server said only 400.

FastAPI's own 422 repeats each bad value whole (a 100 MB body came back as a
100 MB reply) and fails on a value JSON cannot carry (``NaN``); here each
error keeps its location, message and type, and the input only when it is a
short string or a finite number. Page routes (``/ui/``) get the message as a
small HTML fragment, API routes as JSON.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from markupsafe import escape
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException

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


async def unreadable_body(exc: HTTPException, request: Request) -> dict[str, Any] | None:
    """The error (at ``body``) of a body that could not be read, from the 400 Starlette or FastAPI raised for it
    (which says only "There was an error parsing the body"), or None when ``exc`` is another error."""
    cause = exc.__cause__ or exc.__context__
    if exc.status_code != 400 or cause is None:
        return None
    if isinstance(cause, UnicodeDecodeError | ValueError):
        body = await request.body()  # a JSON body, read whole before it was parsed: kept by the request
    if isinstance(cause, UnicodeDecodeError):
        where = _after_key(body, cause.start)
        msg = f"the body is not UTF-8 text (JSON is UTF-8, RFC 8259 section 8.1): byte 0x{body[cause.start]:02x} at offset {cause.start:,}{where}"
        return {"type": "json_invalid", "loc": ["body"], "msg": msg}
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        digits = sys.get_int_max_str_digits()
        found = re.search(rb"[0-9]{%d,}" % (digits + 1), body)
        start, length = (found.start(), len(found.group())) if found else (0, 0)
        msg = f"a number in the body has {length:,} digits{_after_key(body, start)}; the limit is {digits:,} digits"
        return {"type": "json_invalid", "loc": ["body"], "msg": msg}
    if isinstance(cause, MultiPartException):
        msg = cause.message
        if msg.startswith("Missing boundary"):
            msg = "the multipart/form-data body has no boundary: its Content-Type needs one (multipart/form-data; boundary=...)"
        return {"type": "form_invalid", "loc": ["body"], "msg": f"the form cannot be read: {msg}"}
    return None


def _after_key(body: bytes, offset: int) -> str:
    """`` (after "docs")``: the last object key before ``offset``, to say where in the body it is; or nothing."""
    keys = re.findall(rb'"([A-Za-z0-9_]{1,64})"\s*:', body[max(0, offset - 4096) : offset])
    return f' (after "{keys[-1].decode()}")' if keys else ""


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        return JSONResponse({"detail": [safe_error(e) for e in errors[:50]]}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        # A body that could not be read is bad input like any other: a 422 naming the body, what is wrong and the limit.
        error = await unreadable_body(exc, request)
        if error is None:
            return await http_exception_handler(request, exc)
        return JSONResponse({"detail": [safe_error(error)]}, status_code=422)

    @app.exception_handler(Busy)
    async def busy(request: Request, exc: Busy) -> Response:
        return _unavailable(request, str(exc), exc.retry_after_s)

    @app.exception_handler(TimedOut)
    async def timed_out(request: Request, exc: TimedOut) -> Response:
        return _unavailable(request, str(exc), 1)
