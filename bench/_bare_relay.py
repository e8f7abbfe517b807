"""A bare HTTP relay (uvicorn + httpx, no framework, no watch): the floor any proxy built on them starts from.

``python -m bench._bare_relay PORT UPSTREAM [LOOP HTTP]`` forwards every request to UPSTREAM and streams the answer
back, on uvicorn's LOOP (``asyncio``, ``uvloop``; default ``auto``) and HTTP parser (``h11``, ``httptools``). The
proxy benchmark runs it beside ``kvscope serve --upstream`` to tell the stack's cost from kvscope's own.
"""

from __future__ import annotations

import sys
from typing import Any

import httpx
import uvicorn

SKIP = {b"host", b"content-length", b"connection", b"transfer-encoding"}


def make_app(upstream: str) -> Any:
    client = httpx.AsyncClient(timeout=60)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k not in SKIP]
        answer = await client.send(client.build_request(scope["method"], upstream + scope["path"], content=body,
                                                        headers=headers), stream=True)
        out = [(k, v) for k, v in answer.headers.raw if k.lower() not in SKIP | {b"date", b"server"}]
        await send({"type": "http.response.start", "status": answer.status_code, "headers": out})
        async for chunk in answer.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await answer.aclose()
        await send({"type": "http.response.body", "body": b""})

    return app


if __name__ == "__main__":
    loop, http = (sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else ("auto", "auto")
    uvicorn.run(make_app(sys.argv[2]), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", loop=loop,
                http=http)
