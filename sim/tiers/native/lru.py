"""vLLM's offloading LRU (``kv_offload/cpu/policies/lru.py``): ranks by request, tails before heads, committed at request end.

vLLM ranks every chunk with a pair (lru.py 16-121): a chunk a request
touches or stores gets the request's rank with minus its end token, so within
a request the tail is older than the head (``insert`` 107-121,
``on_request_access`` 132-152); when the request ends, every chunk it saw gets
a fresh rank, tail first, so its head ends most recent (``on_request_finished``
154-163). ``evict`` takes the lowest ranks, skipping protected chunks, all
``n`` or none (174-219).

Served one request at a time, the request's rank is above every committed
rank (it is drawn after every earlier request ended, 51-61), so the order is
a list of committed chunks (front oldest) followed by the running request's
chunks by descending end token. ``touch`` (128-130) is never called by the
scheduler (``offloading/scheduler.py`` calls ``lookup``, ``prepare_load``,
``prepare_store`` and ``on_request_finished`` only), so nothing else moves a chunk.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from sim.tiers.native.base import NativePolicy
from sim.tiers.policies.base import StoredChunk


class NativeLru(NativePolicy):
    name = "lru"
    origin = "vLLM 0.33 kv_offload/cpu/policies/lru.py 26-233 (LRUCachePolicy)"

    def __init__(self, capacity_chunks: int) -> None:
        super().__init__(capacity_chunks)
        self._committed: OrderedDict[int, None] = OrderedDict()  # front: the lowest rank
        self._running: dict[int, int] = {}  # the running request's chunks: key -> end token

    def access(self, keys: Iterable[tuple[int, int]]) -> None:
        chunks, running, committed = self.chunks, self._running, self._committed
        for key, position in keys:
            if key in chunks and key not in running:
                del committed[key]
                running[key] = position

    def insert(self, key: int, chunk: StoredChunk, position: int) -> None:
        self.chunks[key] = chunk
        self._running[key] = position

    def _by_rank(self) -> Iterable[int]:
        yield from self._committed
        running = self._running
        yield from sorted(running, key=running.__getitem__, reverse=True)

    def evict(self, n: int, protected: set[int]) -> list[tuple[int, StoredChunk]] | None:
        if n == 0:
            return []
        chosen: list[int] = []
        for key in self._by_rank():
            if key not in protected:
                chosen.append(key)
                if len(chosen) == n:
                    break
        if len(chosen) < n:
            return None  # nothing changes (lru.py 201-206)
        out = []
        for key in chosen:
            if key in self._committed:
                del self._committed[key]
            else:
                del self._running[key]
            out.append((key, self.chunks.pop(key)))
        return out

    def finish(self, keys: Sequence[int], inserted_only: set[int], reused: set[int]) -> None:
        committed, running, chunks = self._committed, self._running, self.chunks
        # Chunks left with the request's rank rank below the fresh ones (none when every chunk it saw is listed).
        for key in sorted(running, key=running.__getitem__, reverse=True):
            committed[key] = None
        running.clear()
        for key in reversed(keys):
            if key in chunks:
                committed.move_to_end(key)
