"""A whole (non-streamed) answer cancelled when its client disconnects, as vLLM's OpenAI server cancels one.

vLLM runs such a handler as a task beside one that reads the ASGI messages
until ``http.disconnect`` (vllm/entrypoints/serve/utils/api_utils.py:53-65,
``listen_for_disconnect``); whichever ends first cancels the other, and a
client that left gets an empty response nobody reads (api_utils.py:68-110,
``with_cancellation``, on /v1/completions and /v1/chat/completions:
openai/completion/api_router.py:50, openai/chat_completion/api_router.py:57).
The cancelled request is aborted in the engine (vllm/v1/engine/async_llm.py:
807-811). A streamed answer needs nothing of this: it is Starlette's
``StreamingResponse`` (completion/api_router.py:74-77), which listens for the
disconnect itself and closes the generator. The request body must have been
read already (FastAPI has parsed it): every later message is consumed here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from starlette.requests import Request

T = TypeVar("T")


class ClientLeft(Exception):
    """The client disconnected before its answer was ready; the work for it was cancelled."""


async def unless_client_leaves(work: Coroutine[Any, Any, T], request: Request) -> T:
    """``work``'s result; ``ClientLeft`` once ``work`` is cancelled (and has cleaned up) for a client that left."""
    task = asyncio.ensure_future(work)
    listener = asyncio.ensure_future(_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, listener}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler is cancelled itself (the server shutting down)
        for pending in (task, listener):
            pending.cancel()
    if task in done:
        return task.result()
    await asyncio.gather(task, return_exceptions=True)  # its cancellation runs its clean-up (the backend's release)
    raise ClientLeft


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
