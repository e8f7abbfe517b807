"""KV events: batches of a real emulator stream decoded, and decoded and applied to the resident state, per second.

The stream is what the emulator publishes for the seed lab's documents read
five times through a GPU a quarter of the lab's size: many single-block
removals, stores of a few hundred blocks, the CPU tier's chunk events. The
anchor is msgspec's own untyped msgpack decoding of the same payloads (no
structs, no checks): the floor any decoder in Python builds on.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

import msgspec

from app.emulator.kv_events import KvEventsBridge
from sim.blocks.prompt_keys import request_for_tokens
from sim.blocks.request import Units
from sim.costs.model import default_costs
from sim.engine.loop import Engine, TierSpec
from sim.kvevents import wire
from sim.kvevents.feed import Feed

RUNS = 5


class _Capture:
    """A publisher that keeps the payloads instead of sending them."""

    def __init__(self) -> None:
        self.payloads: list[bytes] = []

    def publish(self, events: list[wire.KvEvent], ts: float | None = None) -> None:
        self.payloads.append(wire.encode(events, ts or 0.0))


def stream() -> tuple[list[bytes], int]:
    units = Units(16, 256)
    engine = Engine("bench", TierSpec(units=units, gpu_tokens=5_380, cpu_tokens=56_173), default_costs())
    capture = _Capture()
    bridge = KvEventsBridge(engine, capture)  # type: ignore[arg-type]
    rng = random.Random(5)
    docs = [[rng.randrange(151_936) for _ in range(5011)] for _ in range(10)]
    for p in range(5):
        for d in rng.sample(range(10), 10):
            tokens = docs[d] + [rng.randrange(151_936) for _ in range(13)]
            request = request_for_tokens(tokens, units, seq=p * 10 + d)
            record, _ = engine.process(request, emit=False)
            bridge.publish(request, tokens, record.gpu_hit_tokens)
    events = sum(len(wire.decode(p).events) for p in capture.payloads)
    return capture.payloads, events


def _rates(events: int, fn: Any) -> dict[str, float]:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    best, median = min(times), statistics.median(times)
    return {"min_s": round(best, 4), "median_s": round(median, 4),
            "events_per_s_best": round(events / best), "events_per_s_median": round(events / median)}


def run() -> dict[str, Any]:
    payloads, events = stream()
    topic = b"kv-events"
    frames = [[topic, seq.to_bytes(8, "big"), p] for seq, p in enumerate(payloads)]

    def anchor() -> None:
        for p in payloads:
            msgspec.msgpack.decode(p)

    def decode() -> None:
        for p in payloads:
            wire.decode(p)

    def apply() -> None:
        feed = Feed(topic="kv-events")
        for f in frames:
            feed.receive(f)

    anchor_r, decode_r, apply_r = _rates(events, anchor), _rates(events, decode), _rates(events, apply)
    return {
        "batches": len(payloads),
        "events": events,
        "anchor_untyped_msgpack": anchor_r,
        "decode": decode_r,
        "decode_and_apply": apply_r,
        "decode_vs_anchor_median": round(decode_r["median_s"] / anchor_r["median_s"], 2),
        "apply_vs_anchor_median": round(apply_r["median_s"] / anchor_r["median_s"], 2),
        "target_events_per_s": 200_000,
    }
