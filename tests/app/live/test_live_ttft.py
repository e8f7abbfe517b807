"""Where the live client's TTFT begins and ends, and that its requests share one connection, against a real uvicorn on loopback."""

from __future__ import annotations

import asyncio
import time

from starlette.types import Receive, Scope, Send

from app.live.client import VllmClient
from app.live.targets import Target
from live_servers import threaded_server

# The server's schedule after it has read the request, in seconds.
BEFORE_TOKEN_S = 0.15  # an empty-text chunk at once, then this long until the first token's line starts
SPLIT_S = 0.10  # the first token's line arrives in two writes this far apart
AFTER_TOKEN_S = 0.30  # then this long until the usage chunk and [DONE]
EMPTY = b'data: {"choices":[{"index":0,"text":""}]}\n\n'
TOKEN = b'data: {"choices":[{"index":0,"text":" w1"}]}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}\n\n'


async def _timed_stream(scope: Scope, receive: Receive, send: Send) -> None:
    assert scope["type"] == "http"
    more = True
    while more:  # the whole request body first
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})

    async def body(data: bytes) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": True})

    await body(EMPTY)
    await asyncio.sleep(BEFORE_TOKEN_S)
    half = len(TOKEN) // 2
    await body(TOKEN[:half])
    await asyncio.sleep(SPLIT_S)
    await body(TOKEN[half:])
    await asyncio.sleep(AFTER_TOKEN_S)
    await body(USAGE + b"data: [DONE]\n\n")
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def test_ttft_ends_with_the_read_that_completes_the_first_non_empty_token() -> None:
    async def measure(url: str) -> tuple[float, float]:
        async with VllmClient(Target("timed", url), timeout_s=10) as client:
            started = time.perf_counter()
            completion = await client.complete("m", "a b c", 1)
            whole_ms = (time.perf_counter() - started) * 1000
        assert (completion.prompt_tokens, completion.cached_tokens) == (3, 2)
        return completion.ttft_ms, whole_ms

    with threaded_server(_timed_stream) as url:
        ttft_ms, whole_ms = asyncio.run(measure(url))
    # Not the empty-text chunk (t = 0) nor the first half of the token's line (150 ms): the line is whole once its
    # second half is read, no earlier than 150 + 100 ms after the request was sent. The span is the request's,
    # not the rest of the stream's: the usage chunk comes 300 ms later and the whole call lasts at least 550 ms.
    lower_ms = (BEFORE_TOKEN_S + SPLIT_S) * 1000
    assert lower_ms <= ttft_ms < lower_ms + AFTER_TOKEN_S * 1000, ttft_ms
    assert whole_ms >= lower_ms + AFTER_TOKEN_S * 1000 > ttft_ms


def test_requests_share_one_kept_alive_connection_even_when_the_stream_ends_after_done() -> None:
    # The server sends [DONE], then ends the body 50 ms later (a separate write). A client that stopped reading
    # at [DONE] would leave the response unfinished and its connection closed, so each request would arrive on
    # a new one (a new client port); read to the end, every request reuses the first connection.
    clients: list[tuple[str, int]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        clients.append(scope["client"])
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": TOKEN + USAGE + b"data: [DONE]\n\n", "more_body": True})
        await asyncio.sleep(0.05)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def three(url: str) -> None:
        async with VllmClient(Target("kept", url), timeout_s=10) as client:
            for _ in range(3):
                await client.complete("m", "a b c", 1)

    with threaded_server(app) as url:
        asyncio.run(three(url))
    assert len(clients) == 3 and len(set(clients)) == 1, clients
