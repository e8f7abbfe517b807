"""The waiting queue: vLLM v1's FCFS ``RequestQueue`` (add at the back, preempted requests back at the front)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class FcfsQueue(Generic[T]):
    """First come, first served; a preempted request goes back to the front.

    vLLM 0.33.0 ``vllm/v1/core/sched/request_queue.py`` 75-128
    (``FCFSRequestQueue``, a deque): ``add_request`` appends, ``pop_request``
    and ``peek_request`` take the front, ``prepend_request`` puts a request
    back at the front (``scheduler.py`` 1842 does so for a preempted one).
    The priority queue is not modelled.
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: deque[T] = deque()

    def add(self, item: T) -> None:
        self._items.append(item)

    def peek(self) -> T:
        if not self._items:
            raise IndexError("peek at an empty waiting queue")
        return self._items[0]

    def pop(self) -> T:
        if not self._items:
            raise IndexError("pop from an empty waiting queue")
        return self._items.popleft()

    def prepend(self, item: T) -> None:
        self._items.appendleft(item)

    def remove(self, item: T) -> None:
        """Take a request out wherever it waits (``remove_request``, request_queue.py 50-53: an aborted request);
        ValueError if absent."""
        self._items.remove(item)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)
