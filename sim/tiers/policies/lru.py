"""LRU, as LMCache's ``LRUCachePolicy``: a hit moves the chunk to the back, eviction takes the front."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from sim.tiers.policies.base import ChunkPolicy, StoredChunk


class Lru(ChunkPolicy):
    name = "lru"
    origin = "LMCache cache_policy/lru.py 45-81: move_to_end on hit, the first evictable key from the front"
    lmcache_name = "LRU"

    def __init__(self, capacity_tokens: int) -> None:
        super().__init__(capacity_tokens)
        self.chunks: OrderedDict[int, StoredChunk] = OrderedDict()

    def hits(self, keys: Iterable[int]) -> None:
        move = self.chunks.move_to_end
        for key in keys:
            move(key)

    def evict(self) -> tuple[int, StoredChunk]:
        return self.chunks.popitem(last=False)
