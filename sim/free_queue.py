"""The GPU's free block queue in eviction order: vLLM's ``FreeKVCacheBlockQueue`` as an LRU.

The front is evicted first. A prefix hit takes a block out of the middle while
its request runs, so removal from the middle must be O(1): vLLM threads a
doubly linked list through its blocks; an ``OrderedDict`` over block ids is
the same list with its links kept in C. Batch methods keep the per-block work
out of Python method calls.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator


class FreeBlockQueue:
    """Free block ids, front (next to evict) to back (most recently freed)."""

    __slots__ = ("_queue",)

    def __init__(self, block_ids: Iterable[int]) -> None:
        self._queue: OrderedDict[int, None] = OrderedDict.fromkeys(block_ids)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[int]:
        return iter(self._queue)

    def popleft_n(self, n: int) -> list[int]:
        """Take ``n`` blocks from the front, oldest first."""
        if n > len(self._queue):
            raise ValueError(f"asked for {n} free blocks, {len(self._queue)} are free")
        pop = self._queue.popitem
        return [pop(last=False)[0] for _ in range(n)]

    def remove(self, block_ids: Iterable[int]) -> None:
        """Take blocks out of the queue (a prefix hit puts them in use); each must be free."""
        queue = self._queue
        for block_id in block_ids:
            del queue[block_id]

    def append(self, block_ids: Iterable[int]) -> None:
        """Put blocks at the back, in the order given (the last one is evicted last)."""
        self._queue.update(dict.fromkeys(block_ids))

    def prepend(self, block_ids: Iterable[int]) -> None:
        """Put blocks at the front, to be reused before any cached block is evicted."""
        queue = self._queue
        for block_id in block_ids:
            queue[block_id] = None
            queue.move_to_end(block_id, last=False)
