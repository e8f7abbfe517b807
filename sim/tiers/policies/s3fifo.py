"""S3-FIFO, as libCacheSim's ``S3FIFO.c``: a small FIFO (10%), a main FIFO with a 2-bit clock (90%), a ghost FIFO.

LMCache 0.5.6 ships no S3-FIFO (``cache_policy/__init__.py`` 13-18 lists LRU,
LFU, FIFO, MRU), so this follows libCacheSim, the reference the tests check
it against. Sizes are in tokens (libCacheSim's bytes):

- a chunk is stored in the small FIFO, or in main if the ghost remembers it,
  or in main while the small FIFO is full and nothing was evicted yet;
- a hit adds one to the chunk's count;
- eviction takes from main while main is over its share or small is empty,
  else from small. Small's oldest goes to main (count reset) if hit at least
  twice, else it is evicted and remembered in the ghost (90% of the capacity,
  FIFO). Main's oldest is kept, moved to the back with its count
  ``min(count, 3) - 1``, while its count is above 0; else evicted.

One difference: libCacheSim refuses a chunk at least as large as the small
FIFO; here it goes to main (only a tier of under ten chunks meets it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from sim.tiers.policies.base import TOKENS, ChunkPolicy, StoredChunk

SMALL_SHARE = 0.10
GHOST_SHARE = 0.90
MOVE_TO_MAIN = 2  # hits a chunk needs in small to move to main instead of being evicted


class S3Fifo(ChunkPolicy):
    name = "s3fifo"
    origin = "libCacheSim cache/eviction/S3FIFO.c (S3FIFO_insert, S3FIFO_evict_small/_main); not in LMCache 0.5.6"

    def __init__(self, capacity_tokens: int) -> None:
        super().__init__(capacity_tokens)
        self._small_cap = int(capacity_tokens * SMALL_SHARE)
        self._main_cap = capacity_tokens - self._small_cap
        self._ghost_cap = int(capacity_tokens * GHOST_SHARE)
        self._small: OrderedDict[int, None] = OrderedDict()  # front = oldest
        self._main: OrderedDict[int, None] = OrderedDict()
        self._ghost: OrderedDict[int, int] = OrderedDict()  # key -> tokens
        self._small_used = self._main_used = self._ghost_used = 0
        self._count: dict[int, int] = {}
        self._has_evicted = False
        self._to_main = False

    def hits(self, keys: Iterable[int]) -> None:
        count = self._count
        for key in keys:
            count[key] += 1

    def admit(self, key: int, tokens: int) -> None:
        remembered = self._ghost.pop(key, None)
        self._to_main = remembered is not None
        if remembered is not None:
            self._ghost_used -= remembered

    def insert(self, key: int, chunk: StoredChunk) -> None:
        self.chunks[key] = chunk
        tokens = chunk[TOKENS]
        to_main = self._to_main or tokens >= self._small_cap or (not self._has_evicted and self._small_used >= self._small_cap)
        self._to_main = False
        if to_main:
            self._main[key] = None
            self._main_used += tokens
        else:
            self._small[key] = None
            self._small_used += tokens
        self._count[key] = 0

    def evict(self) -> tuple[int, StoredChunk]:
        self._has_evicted = True
        while True:
            if self._main_used > self._main_cap or not self._small_used:
                victim = self._evict_main()
            else:
                victim = self._evict_small()
            if victim is not None:
                return victim

    def _evict_small(self) -> tuple[int, StoredChunk] | None:
        small, chunks, count = self._small, self.chunks, self._count
        while small:
            key, _ = small.popitem(last=False)
            tokens = chunks[key][TOKENS]
            self._small_used -= tokens
            if count[key] >= MOVE_TO_MAIN:
                self._main[key] = None
                self._main_used += tokens
                count[key] = 0
                continue
            self._remember(key, tokens)
            del count[key]
            return key, chunks.pop(key)
        return None

    def _evict_main(self) -> tuple[int, StoredChunk] | None:
        main, chunks, count = self._main, self.chunks, self._count
        while main:
            key = next(iter(main))
            c = count[key]
            if c >= 1:
                main.move_to_end(key)
                count[key] = min(c, 3) - 1
                continue
            del main[key]
            self._main_used -= chunks[key][TOKENS]
            del count[key]
            return key, chunks.pop(key)
        return None

    def _remember(self, key: int, tokens: int) -> None:
        """The ghost: a FIFO of evicted keys, bounded in tokens."""
        ghost = self._ghost
        if key in ghost or tokens > self._ghost_cap:
            return
        while self._ghost_used + tokens > self._ghost_cap:
            _, old = ghost.popitem(last=False)
            self._ghost_used -= old
        ghost[key] = tokens
        self._ghost_used += tokens
