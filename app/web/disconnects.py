"""Keeps a client leaving an SSE stream out of the error log: that is routine, not an exception of the app.

FastAPI's SSE responses pass messages through a keep-alive task into a memory
stream that the response reads. When the client goes, the response stops
reading and that stream is closed while the task may still be handing it a
message: the task's ``anyio.BrokenResourceError`` then leaves the request as an
exception group, and uvicorn logs it as "Exception in ASGI application" with
a traceback through FastAPI alone. Our generator cannot catch it (it is raised
in FastAPI's task, not in ours), so it is dropped here, and only that: an
exception group made of nothing but ``BrokenResourceError``, from an SSE
response that had started and never finished. Our stream's own ending (its
``finally``, counted as abandoned) has run by then.
"""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class QuietDisconnects:
    """Plain ASGI middleware, so that streams pass straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Any scope passes through unchanged; only an HTTP response can be an unfinished SSE stream.
        streaming = finished = False

        async def watch(message: Message) -> None:
            nonlocal streaming, finished
            if message["type"] == "http.response.start":
                streaming = _content_type(message).startswith(b"text/event-stream")
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except BaseExceptionGroup as group:
            _, others = group.split(anyio.BrokenResourceError)
            if not (streaming and not finished and others is None):
                raise


def _content_type(start: Message) -> bytes:
    return dict(start.get("headers", [])).get(b"content-type", b"")
