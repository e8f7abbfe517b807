"""Core events as Server-Sent Events: one message per event, named by its kind, that stops when the client leaves.

Every stream of the app goes through ``event_stream`` so that each is counted
in ``StreamStats`` (shown by ``/healthz``): the simulator's (a plain iterator)
and live mode's (an async one). FastAPI cancels the generator when the client
disconnects; its ``finally`` then records the stream as abandoned and closes
the source, so no further request is simulated or sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, TypeVar

import anyio
from fastapi.sse import ServerSentEvent

from sim.engine.events import Error

log = logging.getLogger(__name__)
T = TypeVar("T")

# The last event of one request of one run: the natural place to pace a stream.
REQUEST_END = "ttft"

# How a stream ended; each is a counter of StreamStats.
Outcome = Literal["completed", "abandoned", "failed"]


@dataclass(slots=True)
class StreamStats:
    """Streams served since start-up. ``open`` must fall back to 0 when clients leave: nothing keeps running."""

    open: int = 0
    started: int = 0
    completed: int = 0
    abandoned: int = 0
    failed: int = 0
    events_sent: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Streamable(Protocol):
    """A core event (``sim.engine.events.Event``), or one read back from the runs database, which carries the same JSON."""

    @property
    def kind(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Encoded:
    """An event whose JSON is already made (by whoever also keeps it): sent as it is, not encoded again. ``data``
    is its JSON form when the maker had it; otherwise ``to_dict`` reads it back from the text (sending never needs it)."""

    kind: str
    text: str
    data: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return json.loads(self.text) if self.data is None else self.data


def message(event: Streamable) -> ServerSentEvent:
    """The SSE message of one core event: ``event:`` is its kind, ``data:`` its JSON form (an ``Encoded`` event's
    text as it is: the same bytes FastAPI's encoder would make of its data, events holding only JSON types)."""
    if isinstance(event, Encoded):
        return ServerSentEvent(event=event.kind, raw_data=event.text)
    return ServerSentEvent(event=event.kind, data=event.to_dict())


async def event_stream(
    events: Iterable[Streamable] | AsyncIterable[Streamable],
    stats: StreamStats,
    *,
    pace_s: float = 0.0,
    on_end: Callable[[Outcome], None] | None = None,
) -> AsyncIterator[ServerSentEvent]:
    """Yield every event as a message, waiting ``pace_s`` after each request; an exception ends it with ``error``.

    ``on_end`` learns how the stream ended, once, whichever way it did.
    """
    source = aiter(events) if isinstance(events, AsyncIterable) else _each(events)
    stats.open += 1
    stats.started += 1
    outcome: Outcome = "abandoned"
    try:
        async for event in source:
            yield message(event)
            stats.events_sent += 1
            if event.kind == REQUEST_END:
                # Also a checkpoint at pace 0, where a disconnect is noticed.
                await anyio.sleep(pace_s)
        outcome = "completed"
    except Exception as exc:  # noqa: BLE001 - the client gets the reason; the stream must end cleanly
        log.exception("stream failed")
        outcome = "failed"
        yield message(Error("", f"{type(exc).__name__}: {exc}"))
    finally:
        stats.open -= 1
        setattr(stats, outcome, getattr(stats, outcome) + 1)
        if on_end is not None:
            on_end(outcome)
        # Now, not whenever the garbage collector gets to it: an abandoned source must stop its work at once.
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()


class OpenStreams:
    """The event streams of one request, each closed when the request ends: ``opened.closing(send(...))``.

    FastAPI pulls a stream's messages in a task of its own and cancels that task when the client leaves; a stream
    then waiting for the client to take its next message (suspended at ``yield``) is never closed by it, only by
    the garbage collector, minutes later: until then it counted as open and its run stayed ``running``. (A client
    closing 1-10 ms after its POST, before the first message, left it so every time.) A route's streams are handed
    to this request-scoped dependency (``Annotated[OpenStreams, Depends(open_streams)]``), which closes them once
    the response is over, after FastAPI's task ended; a stream that ended by itself is closed already (no-op).
    """

    def __init__(self) -> None:
        self._streams: list[AsyncGenerator[Any, None]] = []

    def closing(self, stream: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
        self._streams.append(stream)
        return stream

    async def close(self) -> None:
        for stream in reversed(self._streams):
            await stream.aclose()


async def open_streams() -> AsyncIterator[OpenStreams]:
    """A dependency: the request's ``OpenStreams``, closed at the request's end."""
    opened = OpenStreams()
    try:
        yield opened
    finally:
        await opened.close()


async def _each(events: Iterable[Streamable]) -> AsyncIterator[Streamable]:
    for event in events:
        yield event
