"""A recording of a KV event stream: JSON lines that ``kvscope watch --from`` plays again and ``kvscope replay`` reads as a trace.

One line per event: ``{"seq", "ts", "event"}``, the event as vLLM's fields
(``type`` is the tag; a bytes hash is base64, an int hash an int). A line of
a GPU ``BlockStored`` is also a Mooncake trace request: ``timestamp`` (ms
since the first batch), ``input_length`` and ``hash_ids`` for the whole
resident chain the stored blocks end (the prompt's prefix as the cache saw
it, one id per ``block_size`` tokens), ``output_length`` 0. The trace reader
skips the other lines, so ``kvscope replay FILE --block-size 16`` replays the
prompts the server cached.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

import msgspec

from sim.bounds import jsontext
from sim.kvevents import wire
from sim.kvevents.state import KvState
from sim.traces.reader import MAX_HASH_ID


class RecordingError(ValueError):
    """A recording line that cannot be played; names the line."""


def trace_id(block_hash: wire.BlockHash) -> int:
    """A block hash as a Mooncake hash id (0 .. 2**63 - 1): an int's low 63 bits, or the first 8 bytes' low 63 bits."""
    if isinstance(block_hash, bytes):
        block_hash = int.from_bytes(block_hash[:8], "big")
    return block_hash & MAX_HASH_ID


class Recorder:
    """Writes each applied batch to ``out``; use ``feed.listeners.append(recorder)``."""

    def __init__(self, out: IO[str], state: KvState) -> None:
        self.out = out
        self.state = state
        self.first_ts: float | None = None
        self.lines = 0

    def __call__(self, seq: int, batch: wire.Decoded) -> None:
        if self.first_ts is None:
            self.first_ts = batch.ts
        write = self.out.write
        for event in batch.events:
            line: dict[str, Any] = {"seq": seq, "ts": batch.ts, "event": msgspec.to_builtins(event)}
            if isinstance(event, wire.BlockStored) and wire.medium_of(event) == wire.MEDIUM_GPU and event.block_hashes:
                chain = self._chain(event)
                line.update({
                    "timestamp": round(max(0.0, (batch.ts - self.first_ts) * 1000), 3),
                    "input_length": len(chain) * event.block_size,
                    "output_length": 0,
                    "hash_ids": [trace_id(h) for h in chain],
                })
            write(json.dumps(line, separators=(",", ":")) + "\n")
            self.lines += 1
        self.out.flush()

    def _chain(self, event: wire.BlockStored) -> list[wire.BlockHash]:
        gpu = self.state.medium(wire.MEDIUM_GPU)
        last = event.block_hashes[-1]
        if last in gpu.blocks:
            return gpu.chain(last)
        return list(event.block_hashes)  # removed again within its own batch: what the event itself names


def read_recording(lines: IO[str]) -> Iterator[tuple[int, float, list[wire.KvEvent]]]:
    """The recorded batches in file order: ``(seq, ts, events)``; ``RecordingError`` names a bad line."""
    current: tuple[int, float, list[wire.KvEvent]] | None = None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = jsontext.loads(raw)  # bounded nesting and finite numbers, as every other input file
            seq, ts = obj["seq"], obj["ts"]
            event = msgspec.convert(obj["event"], wire.KvEvent)  # type: ignore[arg-type]
        except (ValueError, KeyError, TypeError, msgspec.ValidationError) as exc:
            raise RecordingError(f"line {number}: not a recorded KV event ({exc})") from None
        if type(seq) is not int or seq < 0 or type(ts) not in (int, float):
            raise RecordingError(f"line {number}: seq must be an integer >= 0 and ts a number")
        if current is not None and current[0] == seq:
            current[2].append(event)
            continue
        if current is not None:
            yield current
        current = (seq, float(ts), [event])
    if current is not None:
        yield current
