"""MRU, as LMCache's ``MRUCachePolicy``: a hit moves the chunk to the back, as LRU, but eviction takes the back."""

from __future__ import annotations

from sim.tiers.policies.base import StoredChunk
from sim.tiers.policies.lru import Lru


class Mru(Lru):
    """LRU's bookkeeping ("since MRU evicts from the back, the logic is same as LRU", ``mru.py`` 29)."""

    name = "mru"
    origin = "LMCache cache_policy/mru.py 24-61: move_to_end on hit, the first evictable key from the back"
    lmcache_name = "MRU"

    def evict(self) -> tuple[int, StoredChunk]:
        return self.chunks.popitem(last=True)
