"""vLLM's offloading LRU (``kv_offload/cpu/policies/lru.py``): ranks by request, tails before heads, committed at request end.

vLLM ranks every chunk with a pair (lru.py 16-121): a chunk a request
touches or stores gets the request's rank with minus its end token, so within
a request the tail is older than the head (``insert`` 107-121,
``on_request_access`` 132-152: a chunk keeps the higher of its rank and the
new one); a request's rank is drawn at its first access (51-61). When the
request ends, every chunk it saw gets a fresh rank, tail first, so its head
ends most recent (``on_request_finished`` 154-163). ``evict`` takes the lowest
ranks, skipping protected chunks, all ``n`` or none (174-219).

Ranks are kept as vLLM's pairs without its heap: a committed chunk's rank is
a fresh number (second member 0), held in an ordered dict in rank order; a
chunk ranked by a request still running sits in that request's group with its
end token. Eviction merges the two orders. Served one request at a time and
every finish applied before the next lookup, a request's rank is above every
committed rank, so the order is the committed chunks followed by the running
request's by descending end token. ``touch`` (128-130) is never called by the
scheduler (``offloading/scheduler.py`` calls ``lookup``, ``prepare_load``,
``prepare_store`` and ``on_request_finished`` only), so nothing else moves a chunk.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence

from sim.tiers.native.base import NativePolicy, RequestAccess
from sim.tiers.policies.base import StoredChunk


class NativeLru(NativePolicy):
    name = "lru"
    origin = "vLLM 0.33 kv_offload/cpu/policies/lru.py 26-233 (LRUCachePolicy)"

    def __init__(self, capacity_chunks: int) -> None:
        super().__init__(capacity_chunks)
        self._committed: OrderedDict[int, int] = OrderedDict()  # key -> rank, ascending: front the lowest
        self._groups: dict[int, dict[int, int]] = {}  # request rank -> {key: end token}
        self._group_of: dict[int, int] = {}  # key -> the request rank it holds
        self._next_rank = 0

    def _rank(self, request: RequestAccess) -> int:
        if request.rank is None:
            self._next_rank += 1
            request.rank = self._next_rank
        return request.rank

    def _take(self, key: int) -> None:
        """Remove ``key`` from wherever its rank is kept."""
        group = self._group_of.pop(key, None)
        if group is None:
            del self._committed[key]
            return
        members = self._groups[group]
        del members[key]
        if not members:
            del self._groups[group]

    def _place(self, key: int, rank: int, position: int) -> None:
        self._groups.setdefault(rank, {})[key] = position
        self._group_of[key] = rank

    def access(self, keys: Iterable[tuple[int, int]], request: RequestAccess) -> None:
        rank = self._rank(request)
        chunks, committed, group_of, groups = self.chunks, self._committed, self._group_of, self._groups
        for key, position in keys:
            if key not in chunks:
                continue
            group = group_of.get(key)
            current = (committed[key], 0) if group is None else (group, -groups[group][key])
            if current >= (rank, -position):
                continue  # lru.py 147-148
            self._take(key)
            self._place(key, rank, position)

    def insert(self, key: int, chunk: StoredChunk, position: int, request: RequestAccess) -> None:
        self.chunks[key] = chunk
        self._place(key, self._rank(request), position)

    def _by_rank(self) -> Iterator[int]:
        committed = ((rank, 0, key) for key, rank in self._committed.items())
        if not self._groups:
            for _, _, key in committed:
                yield key
            return
        running = [sorted((rank, -p, key) for key, p in members.items()) for rank, members in self._groups.items()]
        for _, _, key in heapq.merge(committed, *running):
            yield key

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
            self._take(key)
            out.append((key, self.chunks.pop(key)))
        return out

    def finish(self, keys: Sequence[int], inserted_only: set[int], reused: set[int], request: RequestAccess) -> None:
        chunks, committed = self.chunks, self._committed
        for key in reversed(keys):  # lru.py 163: a fresh rank each, tail first
            if key in chunks:
                self._take(key)
                self._next_rank += 1
                committed[key] = self._next_rank
