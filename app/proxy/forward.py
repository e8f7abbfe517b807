"""Forwarding one OpenAI request to an upstream, unchanged, and passing its answer back as it arrives.

The request body goes up byte for byte (after a size check); the answer's
status, headers (but hop-by-hop ones) and body come back byte for byte, each
chunk as soon as the upstream sends it. An upstream that cannot be reached
gives 502, one that does not answer within the timeout 504, both with an
OpenAI-style error body naming the upstream. While chunks pass, the first one
holding generated text marks the time to first token (TTFT).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import httpx
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.proxy.upstreams import Upstream

MAX_BODY_BYTES = 8 * 2**20
# Headers that belong to one connection, not to the message (RFC 9110 section 7.6.1), plus those the proxy's own
# server sets (a second Date or Server would be a duplicate).
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding",
    "upgrade", "host", "content-length", "date", "server",
})


@dataclass(slots=True)
class Exchange:
    """What one proxied request did: its body, and when its answer started, first carried text, and ended."""

    upstream: str
    path: str
    body: bytes
    started: float = field(default_factory=time.perf_counter)
    status: int | None = None
    streamed: bool = False
    ttft_ms: float | None = None
    latency_ms: float | None = None
    error: str | None = None


def error_response(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}}, status_code=status)


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes | None:
    """The request body, or None when it is larger than ``limit`` (read no further than that)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def forward(
    client: httpx.AsyncClient, upstream: Upstream, request: Request, path: str, done: Callable[[Exchange], None],
) -> Response:
    """Send ``request`` to ``upstream`` at ``path``; ``done(exchange)`` runs once the answer has been passed on."""
    body = await read_body(request)
    if body is None:
        return error_response(413, f"the request body is larger than {MAX_BODY_BYTES:,} bytes (the limit)", "BadRequestError")
    exchange = Exchange(upstream.name, path, body)
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
    outgoing = client.build_request(request.method, upstream.url + path, content=body, headers=headers)
    try:
        answer = await client.send(outgoing, stream=True)
    except httpx.TimeoutException:
        exchange.error = f"upstream {upstream.name} did not answer within {client.timeout.read:g} s"
        done(exchange)
        return error_response(504, exchange.error, "GatewayTimeout")
    except httpx.HTTPError as exc:
        exchange.error = f"upstream {upstream.name} cannot be reached ({type(exc).__name__})"
        done(exchange)
        return error_response(502, exchange.error, "BadGateway")
    exchange.status = answer.status_code
    exchange.streamed = answer.headers.get("content-type", "").startswith("text/event-stream")
    passed = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in HOP_BY_HOP]
    return StreamingResponse(_relay(answer, exchange, done), status_code=answer.status_code, headers=dict(passed))


async def _relay(answer: httpx.Response, exchange: Exchange, done: Callable[[Exchange], None]) -> AsyncIterator[bytes]:
    watcher = _FirstText() if exchange.streamed else None
    try:
        async for chunk in answer.aiter_raw():
            if watcher is not None and exchange.ttft_ms is None and watcher.feed(chunk):
                exchange.ttft_ms = round((time.perf_counter() - exchange.started) * 1000, 3)
            yield chunk
    except httpx.HTTPError as exc:
        exchange.error = f"upstream {exchange.upstream} broke off mid-answer ({type(exc).__name__})"
        raise
    finally:
        await answer.aclose()
        exchange.latency_ms = round((time.perf_counter() - exchange.started) * 1000, 3)
        done(exchange)


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
    except ValueError:
        return False
    if not isinstance(data, dict):
        return False
    for choice in data.get("choices") or ():
        if isinstance(choice, dict):
            delta = choice.get("delta")
            if choice.get("text") or (isinstance(delta, dict) and delta.get("content")):
                return True
    return False
