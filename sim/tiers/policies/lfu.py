"""LFU, as LMCache's ``LFUCachePolicy``: evict the least often hit chunk; among equals, the one that got there first.

A stored chunk starts at frequency 1; each hit moves it to the back of the
next frequency's bucket (``lfu.py`` 38-65). Eviction scans the buckets from
the lowest frequency, each in insertion order (80-105); a chunk evicted and
stored again starts over at 1.
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.tiers.policies.base import ChunkPolicy, StoredChunk


class Lfu(ChunkPolicy):
    name = "lfu"
    origin = "LMCache cache_policy/lfu.py 16-105: frequency buckets, FIFO within a bucket"
    lmcache_name = "LFU"

    def __init__(self, capacity_tokens: int) -> None:
        super().__init__(capacity_tokens)
        self._freq: dict[int, int] = {}
        self._buckets: dict[int, dict[int, None]] = {}  # frequency -> keys in the order they entered it

    def hits(self, keys: Iterable[int]) -> None:
        freq, buckets = self._freq, self._buckets
        for key in keys:
            f = freq[key]
            bucket = buckets[f]
            del bucket[key]
            if not bucket:
                del buckets[f]
            freq[key] = f + 1
            buckets.setdefault(f + 1, {})[key] = None

    def insert(self, key: int, chunk: StoredChunk) -> None:
        self.chunks[key] = chunk
        self._freq[key] = 1
        self._buckets.setdefault(1, {})[key] = None

    def evict(self) -> tuple[int, StoredChunk]:
        buckets = self._buckets
        f = min(buckets)
        bucket = buckets[f]
        key = next(iter(bucket))
        del bucket[key]
        if not bucket:
            del buckets[f]
        del self._freq[key]
        return key, self.chunks.pop(key)
