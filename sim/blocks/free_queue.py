"""The GPU's free block queue in eviction order: vLLM's ``FreeKVCacheBlockQueue`` as an LRU, over blocks made on first use.

The front is evicted first. A prefix hit takes a block out of the middle while
its request runs, so removal from the middle must be O(1): vLLM threads a
doubly linked list through its blocks; an ``OrderedDict`` over block ids is
the same list with its links kept in C. Batch methods keep the per-block work
out of Python method calls.

vLLM builds every block up front; here a block the pool never handed out is
only a number in ``FreshBlocks`` (a range), so a pool of 10^8 blocks serving
a small workload costs what the workload uses. The order is the same: the
never-used blocks sit, lowest id first, where vLLM's initial queue has them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator


class FreshBlocks:
    """Block ids ``next..end`` that were never handed out, taken lowest first.

    ``on_take(high)`` tells the pool that ids below ``high`` now exist, so that
    its per-block tables grow only as far as blocks are used.
    """

    __slots__ = ("next", "end", "_on_take")

    def __init__(self, start: int, end: int, on_take: Callable[[int], None] | None = None) -> None:
        self.next = start
        self.end = end
        self._on_take = on_take

    def __len__(self) -> int:
        return self.end - self.next

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.next, self.end))

    def take(self, n: int) -> list[int]:
        """The ``n`` lowest fresh ids (fewer if fewer remain)."""
        lo = self.next
        self.next = hi = min(self.end, lo + n)
        if self._on_take is not None and hi > lo:
            self._on_take(hi)
        return list(range(lo, hi))


class FreeBlockQueue:
    """Free block ids, front (next to evict) to back (most recently freed).

    The queue is ``_front`` + the fresh blocks + ``_back``: freed blocks are
    prepended to ``_front`` or appended to ``_back``, and popping drains
    ``_front``, then the fresh blocks, then ``_back``. Once no fresh block is
    left (``_front`` is empty then), both names refer to one ``OrderedDict``.
    """

    __slots__ = ("_front", "_back", "_fresh")

    def __init__(self, block_ids: Iterable[int] | FreshBlocks) -> None:
        if isinstance(block_ids, FreshBlocks):
            self._fresh: FreshBlocks | None = block_ids
            self._front: OrderedDict[int, None] = OrderedDict()
            self._back: OrderedDict[int, None] = OrderedDict()
        else:
            self._fresh = None
            self._front = self._back = OrderedDict.fromkeys(block_ids)
        self._merge_if_fresh_gone()

    def _merge_if_fresh_gone(self) -> None:
        if self._fresh is not None and not self._fresh:
            assert not self._front or self._front is self._back, "the front drains before the fresh blocks"
            self._fresh = None
            self._front = self._back

    def __len__(self) -> int:
        if self._front is self._back:
            return len(self._back)
        return len(self._front) + len(self._fresh or ()) + len(self._back)

    def __iter__(self) -> Iterator[int]:
        if self._front is self._back:
            return iter(self._back)
        return self._iter_parts()

    def _iter_parts(self) -> Iterator[int]:
        yield from self._front
        yield from self._fresh or ()
        yield from self._back

    def popleft_n(self, n: int) -> list[int]:
        """Take ``n`` blocks from the front, oldest first."""
        if n > len(self):
            raise ValueError(f"asked for {n} free blocks, {len(self)} are free")
        if self._front is self._back:
            pop = self._back.popitem
            return [pop(last=False)[0] for _ in range(n)]
        pop = self._front.popitem
        out = [pop(last=False)[0] for _ in range(min(n, len(self._front)))]
        if len(out) < n and self._fresh is not None:
            out += self._fresh.take(n - len(out))
            self._merge_if_fresh_gone()
        if len(out) < n:
            pop = self._back.popitem
            out += [pop(last=False)[0] for _ in range(n - len(out))]
        return out

    def remove(self, block_ids: Iterable[int]) -> None:
        """Take blocks out of the queue (a prefix hit puts them in use); each must be free, hence not fresh."""
        back = self._back
        if self._front is back:
            for block_id in block_ids:
                del back[block_id]
            return
        front = self._front
        for block_id in block_ids:
            if block_id in back:
                del back[block_id]
            else:
                del front[block_id]

    def append(self, block_ids: Iterable[int]) -> None:
        """Put blocks at the back, in the order given (the last one is evicted last)."""
        self._back.update(dict.fromkeys(block_ids))

    def prepend(self, block_ids: Iterable[int]) -> None:
        """Put blocks at the front, to be reused before any cached block is evicted."""
        queue = self._front
        for block_id in block_ids:
            queue[block_id] = None
            queue.move_to_end(block_id, last=False)
