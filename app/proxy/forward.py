"""Forwarding one OpenAI request to an upstream, unchanged, and passing its answer back as it arrives.

The request body goes up byte for byte (after a size check); the answer's
status, headers (but hop-by-hop ones) and body come back byte for byte, each
chunk as soon as the upstream sends it. An upstream that cannot be reached
gives 502, one that does not answer within the read timeout 504, both with an
OpenAI-style error body naming the upstream. An upstream that falls silent
for longer than the read timeout mid-answer, or breaks off, cuts the answer
short: a streamed one first gets an error event in vLLM's shape
(``data: {"error": {...}}``, as vLLM's own stream generators send on a
failure), then the connection closes without the body's end, so every client
sees the answer is incomplete. While chunks pass, the first one holding
generated text marks the time to first token (TTFT). A client that leaves
mid-answer closes the upstream request too, so the server stops work nobody
will read. Nothing but passing bytes happens between the upstream's first
chunk and the client: the watch's bookkeeping runs once the answer is over.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import anyio
import httpx
from fastapi.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from app.proxy.upstreams import Upstream

MAX_BODY_BYTES = 8 * 2**20
# Headers that belong to one connection, not to the message (RFC 9110 section 7.6.1), plus those the proxy's own
# server sets (a second Date or Server would be a duplicate).
HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
    b"transfer-encoding", b"upgrade", b"host", b"content-length", b"date", b"server",
})


@dataclass(slots=True)
class Exchange:
    """What one proxied request did: its body, and when its answer started, first carried text, and ended."""

    upstream: str
    path: str
    body: bytes
    started: float = field(default_factory=time.perf_counter)
    started_wall_s: float = field(default_factory=time.time)  # formatted only when the watch records it
    status: int | None = None
    streamed: bool = False
    ttft_ms: float | None = None
    latency_ms: float | None = None
    error: str | None = None
    complete: bool = False  # the whole answer was handed to the server (the client may go from then on)


def error_response(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}}, status_code=status)


async def read_body(receive: Receive, declared: str | None, limit: int = MAX_BODY_BYTES) -> bytes | None:
    """The request body, or None when it is larger than ``limit`` (read no further than that)."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def forward(
    client: httpx.AsyncClient, upstream: Upstream, path: str, scope: Scope, receive: Receive, send: Send,
    done: Callable[[Exchange], None], first_byte: Callable[[], None] = lambda: None,
) -> None:
    """Send the request of ``scope`` to ``upstream`` at ``path`` and its answer back, as plain ASGI (no framework
    in between, so the proxy adds as little as it can); ``first_byte()`` runs once the answer's first chunk has been
    passed on (or the request ended without one), ``done(exchange)`` once the answer has been passed on."""
    passed = False

    def finish(exchange: Exchange) -> None:
        nonlocal passed
        if not passed:
            passed = True
            first_byte()
        done(exchange)

    headers: list[tuple[bytes, bytes]] = scope["headers"]  # names in lower case (the ASGI spec)
    declared = next((v.decode("latin-1") for k, v in headers if k == b"content-length"), None)
    body = await read_body(receive, declared)
    if body is None:
        finish(Exchange(upstream.name, path, b"", status=413))  # the client's own error: recorded, not a warning
        await error_response(413, f"the request body is larger than {MAX_BODY_BYTES:,} bytes (the limit)",
                             "BadRequestError")(scope, receive, send)
        return
    exchange = Exchange(upstream.name, path, body)
    # The client's headers only, none of httpx's defaults (so the upstream sees what the client sent), but for the
    # upstream's own token when one is configured (it replaces the client's); and the URL parsed once per path
    # (httpx's URL parsing is a good part of a request's cost).
    sent = [(k, v) for k, v in headers if k not in HOP_BY_HOP]
    if upstream.token is not None:
        sent = [(k, v) for k, v in sent if k != b"authorization"] + [(b"authorization", b"Bearer " + upstream.token.encode())]
    outgoing = httpx.Request(scope["method"], _url(upstream.url, path), content=body, headers=sent,
                             extensions={"timeout": client.timeout.as_dict()})
    try:
        answer = await client.send(outgoing, stream=True)
    except httpx.TimeoutException:
        exchange.error = f"upstream {upstream.name} did not answer within {client.timeout.read:g} s"
        finish(exchange)
        await error_response(504, exchange.error, "GatewayTimeout")(scope, receive, send)
        return
    except httpx.HTTPError as exc:
        exchange.error = f"upstream {upstream.name} cannot be reached ({type(exc).__name__})"
        finish(exchange)
        await error_response(502, exchange.error, "BadGateway")(scope, receive, send)
        return
    exchange.status = answer.status_code
    exchange.streamed = answer.headers.get("content-type", "").startswith("text/event-stream")

    def first() -> None:
        nonlocal passed
        passed = True
        first_byte()

    try:
        async with anyio.create_task_group() as group:

            async def client_left() -> None:
                # The server says so on receive(); then the upstream's answer (and its work) is dropped at once.
                while (await receive())["type"] != "http.disconnect":
                    pass
                if not exchange.complete:
                    exchange.error = "the client left mid-answer"
                    group.cancel_scope.cancel()

            group.start_soon(client_left)
            await _relay(answer, exchange, send, client.timeout.read, first)
            group.cancel_scope.cancel()
    finally:
        await answer.aclose()
        exchange.latency_ms = round((time.perf_counter() - exchange.started) * 1000, 3)
        finish(exchange)


async def _relay(
    answer: httpx.Response, exchange: Exchange, send: Send, read_timeout_s: float | None, first: Callable[[], None],
) -> None:
    watcher = _FirstText() if exchange.streamed else None
    await send({
        "type": "http.response.start", "status": answer.status_code,
        "headers": [(k, v) for k, v in answer.headers.raw if k.lower() not in HOP_BY_HOP],
    })
    passed, last = False, b"\n\n"
    try:
        async for chunk in answer.aiter_raw():
            arrived = time.perf_counter()
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            # Read for text once the chunk is on its way: the time is when it arrived.
            if watcher is not None and exchange.ttft_ms is None and watcher.feed(chunk):
                exchange.ttft_ms = round((arrived - exchange.started) * 1000, 3)
            if not passed:
                passed = True
                first()
            if chunk:
                last = chunk[-2:]
    except httpx.ReadTimeout:
        exchange.error = f"upstream {exchange.upstream} sent nothing for {read_timeout_s:g} s mid-answer"
        status, kind = 504, "GatewayTimeout"
    except httpx.HTTPError as exc:
        exchange.error = f"upstream {exchange.upstream} broke off mid-answer ({type(exc).__name__})"
        status, kind = 502, "BadGateway"
    else:
        exchange.complete = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    if exchange.streamed:
        # On a line of its own, whatever the upstream's last chunk left open.
        lead = b"" if last.endswith(b"\n\n") else b"\n\n"
        event = _error_event(exchange.error, status, kind)
        await send({"type": "http.response.body", "body": lead + event, "more_body": True})
    # Returning without the body's end: the server closes the connection, so the client knows the answer is cut.


@lru_cache(maxsize=64)
def _url(base: str, path: str) -> httpx.URL:
    return httpx.URL(base + path)


def _error_event(message: str, status: int, kind: str) -> bytes:
    """An SSE error event as vLLM sends one mid-stream (vllm/entrypoints/openai/completion/serving.py:556-557,
    ``create_streaming_error_response``: an ``ErrorResponse``, vllm/entrypoints/serve/engine/protocol.py:79-87)."""
    error = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return b"data: " + json.dumps(error).encode() + b"\n\n"


class _FirstText:
    """Reads server-sent events as they pass and says when one first carries generated text."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> bool:
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        return any(_has_text(line) for line in lines)


def _has_text(line: bytes) -> bool:
    if not line.startswith(b"data:"):
        return False
    try:
        data = json.loads(line[5:])
    except (ValueError, RecursionError):
        return False
    if not isinstance(data, dict):
        return False
    for choice in data.get("choices") or ():
        if isinstance(choice, dict):
            delta = choice.get("delta")
            if choice.get("text") or (isinstance(delta, dict) and delta.get("content")):
                return True
    return False
