"""FIFO, as LMCache's ``FIFOCachePolicy``: chunks leave in the order they were stored; hits change nothing."""

from __future__ import annotations

from collections.abc import Iterable

from sim.tiers.policies.base import ChunkPolicy, StoredChunk


class Fifo(ChunkPolicy):
    name = "fifo"
    origin = "LMCache cache_policy/fifo.py 20-58: an insertion-ordered dict, hits ignored, evict from the front"
    lmcache_name = "FIFO"

    def hits(self, keys: Iterable[int]) -> None:
        pass

    def evict(self) -> tuple[int, StoredChunk]:
        chunks = self.chunks
        key = next(iter(chunks))
        return key, chunks.pop(key)
