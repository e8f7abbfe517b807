"""A deterministic OpenAI-style upstream for proxy tests, on a real uvicorn in a thread: it keeps the raw bodies it
received and answers each path in a fixed way (JSON, paced SSE chunks, errors, a stream that breaks off)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from live_servers import threaded_server

CHUNK_GAP_S = 0.4
STALL_S = 30.0  # an upstream that falls silent: far longer than any proxy timeout the tests set
MODELS = b'{"object":"list","data":[{"id":"fake","object":"model","created":1,"owned_by":"test"}]}'


def make_app(received: list[bytes], headers: list[dict[str, list[str]]] | None = None) -> FastAPI:
    """``headers``, when given, gets each completion request's headers (name -> its values, in order)."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> Response:
        return Response(MODELS, media_type="application/json", headers={"x-upstream": "fake"})

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body = await request.body()
        received.append(body)
        if headers is not None:
            seen: dict[str, list[str]] = {}
            for name, value in request.headers.items():
                seen.setdefault(name, []).append(value)
            headers.append(seen)
        if b'"fail"' in body:
            return JSONResponse({"error": {"message": "busy", "type": "ServiceUnavailable", "code": 503}}, status_code=503)
        if b'"stall"' in body and b'"stream": true' not in body:
            await asyncio.sleep(STALL_S)  # silent before its answer starts
        if b'"bad"' in body:
            return Response(b'{"error": {"message": "bad prompt"}}', status_code=400, media_type="application/json")
        if b'"stream": true' not in body:
            return Response(b'{"id":"x","choices":[{"text":" hello"}],"echo":' + str(len(body)).encode() + b"}",
                            media_type="application/json")
        return StreamingResponse(_chunks(b'"break"' in body, b'"stall"' in body), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await request.body()
        received.append(body)
        return StreamingResponse(_chat_chunks(), media_type="text/event-stream")

    return app


async def _chat_chunks() -> AsyncIterator[bytes]:
    yield b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
    await asyncio.sleep(CHUNK_GAP_S)
    yield b'data: {"choices":[{"delta":{"content":" hi"}}]}\n\n'
    yield b"data: [DONE]\n\n"


async def _chunks(breaks: bool, stalls: bool) -> AsyncIterator[bytes]:
    for i in range(3):
        if i:
            await asyncio.sleep(CHUNK_GAP_S)
        yield b'data: {"choices":[{"text":" t' + str(i).encode() + b'"}]}\n\n'
        if breaks and i == 1:
            raise RuntimeError("the upstream breaks off mid-stream")
        if stalls and i == 1:
            await asyncio.sleep(STALL_S)  # silent mid-answer, the connection open
    yield b"data: [DONE]\n\n"


@contextmanager
def fake_upstream(headers: list[dict[str, list[str]]] | None = None) -> Iterator[tuple[str, list[bytes]]]:
    """Its base URL and the list of request bodies it received (and their headers into ``headers`` if given)."""
    received: list[bytes] = []
    with threaded_server(make_app(received, headers)) as url:
        yield url, received
