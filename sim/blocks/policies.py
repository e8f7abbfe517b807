"""GPU eviction policies: the free block queue as a plug-in, looked up by name, one class per policy.

vLLM's free queue is an LRU (``sim.blocks.free_queue.FreeBlockQueue``, used unchanged
so that its hot path stays as fast as it is). The others are "what if" policies
for the same pool; each keeps the interface the pool uses:

- ``popleft_n(n)``: the next ``n`` blocks to reuse, in eviction order;
- ``remove(ids)``: a prefix hit takes blocks out while their request runs;
- ``append(ids)``: a request freed cached blocks, tail first (vLLM's order);
- ``prepend(ids)``: freed blocks that hold nothing (a partial tail block).

Every policy other than LRU reuses blocks that hold nothing before evicting
anything: throwing away cached KV while an empty block is free is never better.
``vllm-legacy``'s habit of queueing empty blocks behind cached ones is LRU's only.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

from sim.blocks.free_queue import FreeBlockQueue, FreshBlocks

if TYPE_CHECKING:
    from sim.blocks.request import Request

NEVER = 1 << 62  # the next use of a block no later request asks for


class BlockTable(Protocol):
    """What a policy may read about the pool's blocks (the pool owns and writes them)."""

    block_hash: list[int | None]
    block_pos: list[int]


class FreeQueue(Protocol):
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[int]: ...
    def popleft_n(self, n: int) -> list[int]: ...
    def remove(self, block_ids: Iterable[int]) -> None: ...
    def append(self, block_ids: Iterable[int]) -> None: ...
    def prepend(self, block_ids: Iterable[int]) -> None: ...


class _EmptyFirst:
    """Blocks that hold nothing, reused before any cached block is evicted; subclasses order the cached ones."""

    def __init__(self, block_ids: Iterable[int] | FreshBlocks, pool: BlockTable) -> None:
        self._pool = pool
        # Freed empty blocks, a stack (the last freed is reused first), then the never-used ones, lowest id first.
        self._empty: list[int] = []
        self._fresh = block_ids if isinstance(block_ids, FreshBlocks) else FreshBlocks(0, 0)
        if not isinstance(block_ids, FreshBlocks):
            self._empty = list(block_ids)[::-1]

    def __len__(self) -> int:
        return len(self._empty) + len(self._fresh) + self._cached_count()

    def __iter__(self) -> Iterator[int]:
        yield from reversed(self._empty)
        yield from self._fresh
        yield from self._cached_order()

    def popleft_n(self, n: int) -> list[int]:
        if n > len(self):
            raise ValueError(f"asked for {n} free blocks, {len(self)} are free")
        empty = self._empty
        take = min(n, len(empty))
        out = [empty.pop() for _ in range(take)]
        if n > len(out):
            out += self._fresh.take(n - len(out))
        if n > len(out):
            out += self._evict(n - len(out))
        return out

    def prepend(self, block_ids: Iterable[int]) -> None:
        self._empty.extend(block_ids)

    def append(self, block_ids: Iterable[int]) -> None:
        block_hash = self._pool.block_hash
        ids = list(block_ids)
        self._empty.extend(b for b in ids if block_hash[b] is None)
        self._queue_cached([b for b in ids if block_hash[b] is not None])

    # -- what a policy decides -----------------------------------------------

    def _cached_count(self) -> int:
        raise NotImplementedError

    def _cached_order(self) -> Iterator[int]:
        raise NotImplementedError

    def _evict(self, n: int) -> list[int]:
        raise NotImplementedError

    def _queue_cached(self, block_ids: list[int]) -> None:
        raise NotImplementedError

    def remove(self, block_ids: Iterable[int]) -> None:
        raise NotImplementedError


class MruQueue(_EmptyFirst):
    """Most recently used first: the last request's blocks are evicted before older ones, tail first within it.

    The request is the unit of use (all its blocks are used together); within
    it, the tail goes first as in vLLM, so what remains of a document is still
    a prefix that can hit.
    """

    def __init__(self, block_ids: Iterable[int] | FreshBlocks, pool: BlockTable) -> None:
        super().__init__(block_ids, pool)
        self._cached: OrderedDict[int, None] = OrderedDict()  # back = evicted first

    def _cached_count(self) -> int:
        return len(self._cached)

    def _cached_order(self) -> Iterator[int]:
        return reversed(self._cached)

    def _evict(self, n: int) -> list[int]:
        pop = self._cached.popitem
        return [pop(last=True)[0] for _ in range(n)]

    def _queue_cached(self, block_ids: list[int]) -> None:
        # Freed tail first; stored head first so the tail sits at the back.
        self._cached.update(dict.fromkeys(reversed(block_ids)))

    def remove(self, block_ids: Iterable[int]) -> None:
        cached = self._cached
        for block_id in block_ids:
            del cached[block_id]


class _Ranked(_EmptyFirst):
    """Cached blocks in a heap by rank (smallest evicted first); removal is lazy.

    Every push gets a fresh entry number; a heap entry is live only while it is
    its block's latest, so a stale copy can never evict a block twice.
    """

    def __init__(self, block_ids: Iterable[int] | FreshBlocks, pool: BlockTable) -> None:
        super().__init__(block_ids, pool)
        self._heap: list[tuple[int, int, int, int]] = []  # (rank, tie, entry, block id)
        self._live: dict[int, tuple[int, int, int]] = {}  # block id -> its live (rank, tie, entry)
        self._entries = 0

    def _cached_count(self) -> int:
        return len(self._live)

    def _cached_order(self) -> Iterator[int]:
        return iter(sorted(self._live, key=self._live.__getitem__))

    def _push(self, block_id: int, rank: int, tie: int) -> None:
        entry = (rank, tie, self._entries)
        self._entries += 1
        self._live[block_id] = entry
        heapq.heappush(self._heap, (*entry, block_id))

    def _evict(self, n: int) -> list[int]:
        heap, live = self._heap, self._live
        out: list[int] = []
        while len(out) < n:
            rank, tie, entry, block_id = heapq.heappop(heap)
            if live.get(block_id) == (rank, tie, entry):
                del live[block_id]
                out.append(block_id)
        return out

    def remove(self, block_ids: Iterable[int]) -> None:
        live = self._live
        for block_id in block_ids:
            del live[block_id]
        if len(self._heap) > 4 * len(live) + 64:
            self._heap = [e for e in self._heap if live.get(e[3]) == e[:3]]
            heapq.heapify(self._heap)


class FifoQueue(_Ranked):
    """First in, first out: blocks are evicted in the order their KV was computed; hits change nothing."""

    def __init__(self, block_ids: Iterable[int] | FreshBlocks, pool: BlockTable) -> None:
        super().__init__(block_ids, pool)
        self._clock = 0
        self._since: dict[int, int] = {}  # block id -> when its current content was queued first

    def popleft_n(self, n: int) -> list[int]:
        out = super().popleft_n(n)
        for block_id in out:
            self._since.pop(block_id, None)  # reused: whatever it gets next is new content
        return out

    def _queue_cached(self, block_ids: list[int]) -> None:
        since = self._since
        for block_id in block_ids:
            stamp = since.get(block_id)
            if stamp is None:
                stamp = since[block_id] = self._clock
                self._clock += 1
            self._push(block_id, stamp, 0)


class Future:
    """When each block key is asked for next: the offline knowledge Belady's policy needs.

    Built from the whole request list; ``now`` is the ``seq`` of the request
    being served (the engine sets it). Only the blocks a request can hit count
    as uses (vLLM recomputes the last token's block).
    """

    def __init__(self, requests: Sequence[Request]) -> None:
        uses: dict[int, list[int]] = {}
        last = -1
        for req in requests:
            if req.seq <= last:
                raise ValueError("requests must be in increasing seq order")
            last = req.seq
            for key in req.block_keys[: req.max_hit_blocks]:
                uses.setdefault(key, []).append(req.seq)
        self._uses = uses
        self.now = -1

    def next_use(self, key: int) -> int:
        seqs = self._uses.get(key)
        if not seqs:
            return NEVER
        i = bisect_right(seqs, self.now)
        return seqs[i] if i < len(seqs) else NEVER


class BeladyQueue(_Ranked):
    """Belady's optimum (offline): evict the block asked for furthest in the future, a document's tail first.

    The blocks of one document are all asked for by the same next request, so
    the tie is broken by position, tail first: what stays of a document is a
    prefix, which is all a prefix cache can hit. Needs ``plan(requests)``
    before the first request.
    """

    def __init__(self, block_ids: Iterable[int] | FreshBlocks, pool: BlockTable) -> None:
        super().__init__(block_ids, pool)
        self.future: Future | None = None

    def plan(self, requests: Sequence[Request]) -> Future:
        self.future = Future(requests)
        return self.future

    def _queue_cached(self, block_ids: list[int]) -> None:
        future = self.future
        if future is None:
            raise RuntimeError("Belady's policy needs the whole request list first (plan(requests))")
        block_hash, block_pos = self._pool.block_hash, self._pool.block_pos
        for block_id in block_ids:
            key = block_hash[block_id]
            assert key is not None
            # Heap pops the smallest: furthest next use first, then the furthest position.
            self._push(block_id, -future.next_use(key), -block_pos[block_id])


QueueFactory = Callable[[Iterable[int] | FreshBlocks, BlockTable], FreeQueue]

GPU_POLICIES: dict[str, QueueFactory] = {
    "lru": lambda block_ids, _pool: FreeBlockQueue(block_ids),
    "fifo": FifoQueue,
    "mru": MruQueue,
    "belady": BeladyQueue,
}
GPU_POLICY_NAMES: tuple[str, ...] = tuple(GPU_POLICIES)
GpuPolicy = Literal[GPU_POLICY_NAMES]  # type: ignore[valid-type]  # the registry's names


def free_queue(policy: str, block_ids: Iterable[int] | FreshBlocks, pool: BlockTable) -> FreeQueue:
    """The free queue of ``policy``; the error lists the known names."""
    try:
        factory = GPU_POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown GPU policy {policy!r}; known: {', '.join(GPU_POLICIES)}") from None
    return factory(block_ids, pool)
