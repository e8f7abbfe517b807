"""Every request is answered by its deadline plus ``MARGIN_S``: its answer, or a 503 with Retry-After.

A request's deadline runs from when it arrived, less the time the server spent waiting for its body (a slow upload
is the client's time; parsing it is the server's): the web budget's ``seconds``, or the longer one a route asks of the
workers (``Workers.run(seconds=...)``, the advisor's search). The workers counted it from their own call, and nothing
bounded the rest: under 100 saturating clients a request waited seconds on the one event loop before its call and
after it, so a 200 came after 7.0 s and a 503 after 7.7 s against a 4 s deadline. Here the call's deadline is the
request's (``Workers.run`` reads it from ``current()``), and a request that has not begun its answer by its deadline
plus ``CUT_S`` is cancelled and answered 503 at once, before its handler has wound down (a thread it waits on, such
as a run being kept, ends when it ends). The cut came at the margin's end itself, so that the 503's own way out
(a few ms) made the slowest answers of a 10-minute fuzz 5.003-5.013 s against 4 + 1; now a quarter of the margin is
left for it. A stream that has begun (SSE) is not cut: its deadline was for its first message. Proxied paths bound
their own time (their upstream's timeout) and never reach this middleware.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextvars import ContextVar
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.web.headers import RAW_HEADERS

# What an answer may take past its deadline: the one statement of the promise (README "Budgets and deadlines").
MARGIN_S = 1.0
# Of it: how long a call a worker has and that has not stopped (a stretch without a checkpoint) is waited for past its
# deadline (``Workers.run``), and when an answer not begun is cut and answered 503 here; the last quarter is for that
# answer's way out (the loop's latency under load, writing it) and for rendering a result that came in late.
WAIT_S = MARGIN_S / 2
CUT_S = MARGIN_S * 3 / 4
RETRY_AFTER_S = 1


@dataclass(slots=True)
class RequestClock:
    """When the request was whole (``time.monotonic``), and the deadline a call of it set (None: the default)."""

    since: float
    deadline: float | None = None


_CLOCK: ContextVar[RequestClock | None] = ContextVar("kvscope_request_clock", default=None)


def current() -> RequestClock | None:
    """The clock of the request being served here, or None outside one (a CLI, a test calling ``Workers.run``)."""
    return _CLOCK.get()


class Deadlines:
    """Plain ASGI middleware: passes a request through, and answers 503 for it if it has not begun by its limit."""

    def __init__(self, app: ASGIApp, default_s: float) -> None:
        self.app = app
        self.default_s = default_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        clock = RequestClock(time.monotonic())
        started = whole = cut = False

        async def timed_receive() -> Message:
            nonlocal whole
            waiting_since = time.monotonic()
            message = await receive()
            if message["type"] == "http.request" and not whole:
                clock.since += time.monotonic() - waiting_since  # waiting for the client's bytes is not the server's time
                whole = not message.get("more_body", False)
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            if cut:  # answered 503 in its place: the handler, winding down, sends nothing more
                return
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), _timing(clock)]}
            await send(message)

        token = _CLOCK.set(clock)
        try:
            task = asyncio.ensure_future(self.app(scope, timed_receive, watching_send))  # runs in this context
        finally:
            _CLOCK.reset(token)

        def deadline() -> float:
            return clock.deadline if clock.deadline is not None else clock.since + self.default_s

        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline() + CUT_S - time.monotonic()))
                if done or started:
                    await task  # finished (its errors raised here), or a stream under way: not ours to cut
                    return
                if time.monotonic() >= deadline() + CUT_S:  # else a call set a later deadline meanwhile: wait for that
                    break
        except BaseException:
            task.cancel()  # this request is being ended (the server stops): its handler with it
            raise
        cut = True
        task.cancel()
        await _unavailable(send, scope["path"], deadline() - clock.since, clock)
        try:
            await task  # only now: a cancelled handler waiting on a thread ends when the thread does
        except asyncio.CancelledError:
            pass


def _timing(clock: RequestClock) -> tuple[bytes, bytes]:
    """``Server-Timing: app;dur=12.3``: ms from the request being whole to its answer starting (the server's share
    of what a client waited; the rest is the network, the kernel's queues and the client itself)."""
    return b"server-timing", f"app;dur={(time.monotonic() - clock.since) * 1000:.1f}".encode()


async def _unavailable(send: Send, path: str, seconds: float, clock: RequestClock) -> None:
    message = f"not answered within {seconds:g} s (the limit here); the server is busy: retry shortly"
    if path.startswith("/ui/"):
        body = f'<p class="error" role="alert">{message}</p>'.encode()
        kind = b"text/html; charset=utf-8"
    else:
        body = json.dumps({"detail": message}).encode()
        kind = b"application/json"
    await send({
        "type": "http.response.start",
        "status": 503,
        "headers": [(b"content-type", kind), (b"retry-after", str(RETRY_AFTER_S).encode()), *RAW_HEADERS,
                    (b"content-length", str(len(body)).encode()), _timing(clock)],
    })
    await send({"type": "http.response.body", "body": body})
