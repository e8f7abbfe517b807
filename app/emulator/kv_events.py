"""The emulator's KV events: what its engine did to each prompt, published in vLLM's format.

Per prefill, one batch (vLLM publishes one per scheduler step), in the order
vLLM emits them:

- ``BlockRemoved([hash], "GPU", group_idx=0)`` for every cached block the
  allocation reused, copies included (block_pool.py:650-664: one event per hash);
- one ``BlockStored`` for the newly cached full blocks: their hashes, the
  parent = the last hit block's hash (None from the first block), their token
  ids, ``extra_keys`` one None per block, ``group_idx=0`` (block_pool.py:302-360,
  kv_cache_utils.py:678-700);
- the CPU tier as vLLM's OffloadingConnector reports it (offloading/events.py:
  287-350, 383-468): per stored chunk one ``BlockStored`` with medium ``"CPU"``
  listing the chunk's GPU block hashes, parent the block before the chunk,
  the chunk's tokens, ``block_size`` the GPU block size; per evicted chunk a
  ``BlockRemoved`` of those hashes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from sim.blocks.request import Request
from sim.engine.loop import Engine
from sim.kvevents import wire
from sim.kvevents.publisher import Publisher


class KvEventsBridge:
    """Turns each prefill's changes to the engine's tiers into one published batch."""

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

    def events(self, request: Request, tokens: Sequence[int], gpu_hit_tokens: int) -> list[wire.KvEvent]:
        """The events of the prefill the engine just did, in vLLM's order; the journals are emptied."""
        gpu, cpu, bs = self.engine.gpu, self.engine.cpu, self.block_size
        out: list[wire.KvEvent] = []
        dropped = gpu.dropped_keys
        assert dropped is not None
        out.extend(wire.BlockRemoved([key], wire.MEDIUM_GPU, 0) for key in dropped)
        dropped.clear()
        keys = request.block_keys
        hit = gpu_hit_tokens // bs
        if hit < len(keys):
            new = keys[hit:]
            out.append(wire.BlockStored(
                new, keys[hit - 1] if hit else None, list(tokens[hit * bs : len(keys) * bs]), bs, None,
                wire.MEDIUM_GPU, None, [None] * len(new), 0,
            ))
        if cpu is not None and cpu.journal:
            index = {key: i for i, key in enumerate(request.chunk_keys)}
            per = self.blocks_per_chunk
            for was_stored, chunk_key in cpu.journal:
                if was_stored:
                    i = index[chunk_key]
                    blocks = keys[i * per : (i + 1) * per]
                    self._chunk_blocks[chunk_key] = blocks
                    out.append(wire.BlockStored(
                        blocks, keys[i * per - 1] if i else None, list(tokens[i * per * bs : (i + 1) * per * bs]), bs,
                        None, wire.MEDIUM_CPU, None, None, 0,
                    ))
                else:
                    out.append(wire.BlockRemoved(self._chunk_blocks.pop(chunk_key), wire.MEDIUM_CPU, 0))
            cpu.journal.clear()
        return out

    def publish(self, request: Request, tokens: Sequence[int], gpu_hit_tokens: int) -> None:
        events = self.events(request, tokens, gpu_hit_tokens)
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
    """Bind the publisher's sockets and have ``backend`` publish every prefill; ``zmq.ZMQError`` if a bind fails."""
    bridge = KvEventsBridge(backend.engine, Publisher(endpoint, replay_endpoint, topic))
    backend.kv_events = bridge
    return bridge
