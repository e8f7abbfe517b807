"""The emulator's KV events: what each engine step did to the tiers, published in vLLM's format.

Per scheduler step, one batch (vLLM publishes the block pool's events once a
step, ``scheduler.py`` ``update_from_output`` -> ``take_events``):

- ``BlockRemoved([hash], "GPU", group_idx=0)`` for every cached block the
  step's allocations reused, copies included (block_pool.py:650-664: one event
  per hash), before the step's stores (a block a request holds cannot be
  evicted in the step that stores it);
- per request that cached full blocks in the step, in scheduling order, one
  ``BlockStored``: their hashes, the parent = the block before them (None
  from the first block), their token ids, ``extra_keys`` one None per block,
  ``group_idx=0`` (block_pool.py:302-360, kv_cache_utils.py:678-700); a
  chunked prefill stores its blocks chunk by chunk, a prefix hit is not
  announced again;
- the CPU tier as vLLM's OffloadingConnector reports it (offloading/events.py:
  287-350, 383-468): per stored chunk one ``BlockStored`` with medium ``"CPU"``
  listing the chunk's GPU block hashes, parent the block before the chunk,
  the chunk's tokens, ``block_size`` the GPU block size; per evicted chunk a
  ``BlockRemoved`` of those hashes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sim.blocks.request import Request
from sim.engine.loop import Engine
from sim.kvevents import wire
from sim.kvevents.publisher import Publisher


@dataclass(frozen=True, slots=True)
class StepStore:
    """A request scheduled in a step, which cached its full GPU blocks ``first..end`` (block indexes; none when
    equal) then, with its prompt's token ids (its chunks stored to CPU are named from them too)."""

    request: Request
    tokens: Sequence[int]
    first: int
    end: int


class KvEventsBridge:
    """Turns each step's changes to the engine's tiers into one published batch."""

    def __init__(self, engine: Engine, publisher: Publisher) -> None:
        self.engine = engine
        self.publisher = publisher
        self.block_size = engine.units.block
        self.blocks_per_chunk = engine.units.chunk // engine.units.block
        engine.gpu.dropped_keys = []
        if engine.cpu is not None:
            engine.cpu.journal = []
        # A stored chunk's block hashes, to name them again when it is evicted.
        self._chunk_blocks: dict[int, list[int]] = {}

    def step_events(self, stored: Sequence[StepStore]) -> list[wire.KvEvent]:
        """The events of the step the engine just ran, in vLLM's order; the journals are emptied."""
        gpu, cpu, bs = self.engine.gpu, self.engine.cpu, self.block_size
        out: list[wire.KvEvent] = []
        dropped = gpu.dropped_keys
        assert dropped is not None
        out.extend(wire.BlockRemoved([key], wire.MEDIUM_GPU, 0) for key in dropped)
        dropped.clear()
        for s in stored:
            if s.end <= s.first:
                continue
            keys = s.request.block_keys
            new = keys[s.first : s.end]
            out.append(wire.BlockStored(
                new, keys[s.first - 1] if s.first else None, list(s.tokens[s.first * bs : s.end * bs]), bs, None,
                wire.MEDIUM_GPU, None, [None] * len(new), 0,
            ))
        if cpu is not None and cpu.journal:
            per = self.blocks_per_chunk
            # The step's chunks, each with its request: a chunk key names the same tokens in any request holding it.
            where = {key: (s, i) for s in stored for i, key in enumerate(s.request.chunk_keys)}
            for was_stored, chunk_key in cpu.journal:
                if was_stored:
                    s, i = where[chunk_key]
                    keys = s.request.block_keys
                    blocks = keys[i * per : (i + 1) * per]
                    self._chunk_blocks[chunk_key] = blocks
                    out.append(wire.BlockStored(
                        blocks, keys[i * per - 1] if i else None, list(s.tokens[i * per * bs : (i + 1) * per * bs]), bs,
                        None, wire.MEDIUM_CPU, None, None, 0,
                    ))
                else:
                    out.append(wire.BlockRemoved(self._chunk_blocks.pop(chunk_key), wire.MEDIUM_CPU, 0))
            cpu.journal.clear()
        return out

    def publish_step(self, stored: Sequence[StepStore]) -> None:
        events = self.step_events(stored)
        if events:
            self.publisher.publish(events, time.time())

    def close(self) -> None:
        self.publisher.close()


class Publishing(Protocol):
    """What ``attach`` needs of the emulator's backend (``app.emulator.backend.Backend``, which imports this module)."""

    engine: Engine
    kv_events: KvEventsBridge | None


def attach(
    backend: Publishing, endpoint: str, replay_endpoint: str | None = None, topic: str = "kv-events"
) -> KvEventsBridge:
    """Bind the publisher's sockets and have ``backend`` publish every step; ``zmq.ZMQError`` if a bind fails."""
    bridge = KvEventsBridge(backend.engine, Publisher(endpoint, replay_endpoint, topic))
    backend.kv_events = bridge
    return bridge
