"""Core events as Server-Sent Events: one message per event, named by its kind, that stops when the client leaves.

Every stream of the app goes through ``event_stream`` so that each is counted
in ``StreamStats`` (shown by ``/healthz``). FastAPI cancels the generator when
the client disconnects; its ``finally`` then records the stream as abandoned
and no further request is simulated.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import anyio
from fastapi.sse import ServerSentEvent

from sim.events import Error, Event

log = logging.getLogger(__name__)

# The last event of one request of one run: the natural place to pace a stream.
REQUEST_END = "ttft"


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


def message(event: Event) -> ServerSentEvent:
    """The SSE message of one core event: ``event:`` is its kind, ``data:`` its JSON form."""
    return ServerSentEvent(event=event.kind, data=event.to_dict())


async def event_stream(events: Iterator[Event], stats: StreamStats, *, pace_s: float = 0.0) -> AsyncIterator[ServerSentEvent]:
    """Yield every event as a message, waiting ``pace_s`` after each request; an exception ends it with ``error``."""
    stats.open += 1
    stats.started += 1
    outcome = "abandoned"
    try:
        for event in events:
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
