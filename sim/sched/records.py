"""A run's records, one request at a time or under load: what an analysis of many runs (a sweep, a curve) reads."""

from __future__ import annotations

from collections.abc import Sequence

from sim.blocks.request import Request
from sim.engine.loop import Engine, RequestRecord
from sim.sched.limit import StepLimit
from sim.sched.serving import Serving
from sim.sched.stepped import SteppedEngine


def served_records(
    engine: Engine, requests: Sequence[Request], serving: Serving | None = None, limit: StepLimit | None = None
) -> list[RequestRecord]:
    """The engine's records of ``requests``: the sequential engine's unless ``serving`` asks for vLLM's scheduler
    loop (then TTFT counts queueing, and ``limit`` stops the run at its work budget)."""
    if serving is None or not serving.stepped:
        return engine.run_all(list(requests))
    return SteppedEngine(engine, serving.scheduler_config()).run(requests, serving.arrivals(), limit).records
