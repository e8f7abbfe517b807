"""A kept ``kvscope watch`` played again as the watch panel's events: its recording's batches through the same
conversion an upstream's live KV events go through (app.proxy.kv_thread), timed by the recording's own clock."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from typing import Any

from app.proxy.kv_thread import KvThread
from sim.engine.events import Event
from sim.kvevents import wire
from sim.kvevents.recording import RecordingError, read_recording

UPSTREAM = "watch"  # the name the kept run's events carry, and the watch panel shows
TOPIC = b"kv-events"


def watch_events(lines: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The ``store``, ``evict`` and ``occupancy`` events (one batch per KV event batch) of a kept watch's recording
    lines; a line that cannot be read ends them with a ``warning`` naming it."""
    events: list[Event] = []
    now = [0.0]
    kv = KvThread(UPSTREAM, "", None, events.append, lambda medium: None, start=False, clock=lambda: now[0])
    batches: list[list[dict[str, Any]]] = []
    text = io.StringIO("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    try:
        for seq, ts, decoded in read_recording(text):
            now[0] = ts
            gap = kv.feed.receive([TOPIC, seq.to_bytes(8, "big"), wire.encode(decoded, ts)])
            if gap is not None:  # as `kvscope watch --from` plays a recording: what it does not hold stays unknown
                kv.feed.fill(gap, [], "not in the recording")
            batches.append([e.to_dict() for e in events])
            events.clear()
    except RecordingError as exc:
        batches.append([{"type": "warning", "run": UPSTREAM, "message": f"the kept recording: {exc}"}])
    kv.flush_occupancy()
    if events:
        batches.append([e.to_dict() for e in events])
    return batches
