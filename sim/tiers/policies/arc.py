"""ARC (Megiddo and Modha, FAST '03), as libCacheSim's ``ARC.c``: T1/T2 data lists, B1/B2 ghosts, an adaptive target.

Sizes in tokens (libCacheSim's bytes). A hit in T1 moves the chunk to T2's
most recent end; a hit in T2 refreshes it there. A chunk a ghost list
remembers moves the target ``p`` for T1 (B1: up by ``max(|B2| / |B1|, 1)``,
capped at the capacity; B2: down by ``max(|B1| / |B2|, 1)``, floored at 0;
``p`` is a float) and is stored in T2; any other chunk goes to T1.

Making room: for a chunk a ghost remembered, REPLACE; for any other, when
``|T1| + |B1|`` plus the chunk exceeds the capacity, drop B1's oldest and
REPLACE (or, with B1 empty, evict T1's oldest without a ghost); otherwise,
with the four lists at twice the capacity, drop B2's oldest, then REPLACE.
REPLACE moves T1's least recent chunk to B1 when T2 is empty or T1 is above
``p`` (or at ``p`` for a chunk B2 remembered), else T2's to B2.

libCacheSim's ARC, not vLLM's: vLLM's offloading ARC (``kv_offload/cpu/policies/arc.py``)
adapts per request and keeps ghosts of the cache's size, so the two differ.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from sim.tiers.policies.base import TOKENS, ChunkPolicy, StoredChunk


class Arc(ChunkPolicy):
    name = "arc"
    origin = "libCacheSim cache/eviction/ARC.c (ARC_find, ARC_insert, _ARC_replace, _ARC_evict_miss_on_all_queues)"

    def __init__(self, capacity_tokens: int) -> None:
        super().__init__(capacity_tokens)
        # Each list's back is its most recent end.
        self._t1: OrderedDict[int, None] = OrderedDict()
        self._t2: OrderedDict[int, None] = OrderedDict()
        self._b1: OrderedDict[int, int] = OrderedDict()  # key -> tokens
        self._b2: OrderedDict[int, int] = OrderedDict()
        self._t1_used = self._t2_used = self._b1_used = self._b2_used = 0
        self._p = 0.0
        self._ghost = 0  # 1 or 2: the ghost list that remembered the chunk being stored, else 0
        self._incoming = 0  # tokens of the chunk being stored

    def hits(self, keys: Iterable[int]) -> None:
        t1, t2, chunks = self._t1, self._t2, self.chunks
        for key in keys:
            if key in t1:
                del t1[key]
                tokens = chunks[key][TOKENS]
                self._t1_used -= tokens
                self._t2_used += tokens
                t2[key] = None
            else:
                t2.move_to_end(key)

    def admit(self, key: int, tokens: int) -> None:
        self._incoming = tokens
        self._ghost = 0
        if key in self._b1:
            self._p = min(self._p + max(self._b2_used / self._b1_used, 1.0), self.capacity_tokens)
            self._b1_used -= self._b1.pop(key)
            self._ghost = 1
        elif key in self._b2:
            self._p = max(self._p - max(self._b1_used / self._b2_used, 1.0), 0.0)
            self._b2_used -= self._b2.pop(key)
            self._ghost = 2

    def insert(self, key: int, chunk: StoredChunk) -> None:
        self.chunks[key] = chunk
        tokens = chunk[TOKENS]
        if self._ghost:
            self._t2[key] = None
            self._t2_used += tokens
        else:
            self._t1[key] = None
            self._t1_used += tokens
        self._ghost = 0

    def evict(self) -> tuple[int, StoredChunk]:
        if self._ghost:
            return self._replace()
        capacity = self.capacity_tokens
        if self._t1_used + self._b1_used + self._incoming > capacity:
            if self._b1:
                _, tokens = self._b1.popitem(last=False)
                self._b1_used -= tokens
                return self._replace()
            key, _ = self._t1.popitem(last=False)
            chunk = self.chunks.pop(key)
            self._t1_used -= chunk[TOKENS]
            return key, chunk
        if self._t1_used + self._b1_used + self._t2_used + self._b2_used >= 2 * capacity and self._b2:
            _, tokens = self._b2.popitem(last=False)
            self._b2_used -= tokens
        return self._replace()

    def _replace(self) -> tuple[int, StoredChunk]:
        """The paper's REPLACE: a data chunk to its ghost list."""
        t1 = self._t1_used
        if (t1 > 0 and (t1 > self._p or (t1 == self._p and self._ghost == 2))) or not self._t2_used:
            key, _ = self._t1.popitem(last=False)
            chunk = self.chunks.pop(key)
            self._t1_used -= chunk[TOKENS]
            self._b1[key] = chunk[TOKENS]
            self._b1_used += chunk[TOKENS]
        else:
            key, _ = self._t2.popitem(last=False)
            chunk = self.chunks.pop(key)
            self._t2_used -= chunk[TOKENS]
            self._b2[key] = chunk[TOKENS]
            self._b2_used += chunk[TOKENS]
        return key, chunk
