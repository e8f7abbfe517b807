"""An engine's event stream with the attribution in it: an ``explain`` event before each ``ttft``, totals by cause
in each ``pass`` and ``done`` summary. Live mode's shadow and the simulator's stream both go through here."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sim.engine.events import Event, Explained, PassDone, RunDone
from sim.engine.loop import Engine
from sim.explain.summary import totals


def explained(engine: Engine, events: Iterable[Event]) -> Iterator[Event]:
    """``events`` of an attributed ``engine`` (``sim.explain.attach``), with the attribution added as it happens."""
    start = len(engine.records)
    for event in events:
        if event.kind == "ttft" and engine.observer is not None:
            rec = engine.records[-1]
            yield Explained(
                engine.run, rec.seq, rec.pass_, rec.doc, rec.gpu_miss or {}, rec.computed or {},
                rec.evicted_misses or [], rec.infinite_hit_tokens or 0,
            )
        elif isinstance(event, PassDone):
            event.summary.update(totals([r for r in engine.records[start:] if r.pass_ == event.summary["pass"]]))
        elif isinstance(event, RunDone):
            event.totals.update(totals(engine.records[start:]))
        yield event
