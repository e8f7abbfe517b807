"""The interface of vLLM's offloading cache policies, as a run where one request is served at a time sees it.

vLLM's ``CachePolicy`` (``vllm/v1/kv_offload/cpu/policies/base.py`` 48-160):
``get``, ``insert``, ``evict(n, protected)`` (atomic: all ``n`` or nothing,
134-145), ``on_store_miss`` (85-94), ``on_request_access`` (96-107) and
``on_request_finished`` (109-131). A chunk is pinned while a transfer uses it
(``ref_cnt``, 25-45); here every transfer of a request completes before the
next request starts, so at a store every held chunk is evictable unless the
store offers it (``protected``, ``cpu/manager.py`` 331-334).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import ClassVar

from sim.tiers.policies.base import StoredChunk


class NativePolicy(ABC):
    """One of vLLM's offloading cache policies; ``chunks`` maps every held key to its chunk (the tier reads it)."""

    name: ClassVar[str]
    origin: ClassVar[str]

    def __init__(self, capacity_chunks: int) -> None:
        self.capacity_chunks = capacity_chunks
        self.chunks: dict[int, StoredChunk] = {}

    def store_miss(self, keys: Sequence[int]) -> None:
        """Chunks a store is about to insert were missing (ARC reads its ghosts here)."""

    def access(self, keys: Iterable[tuple[int, int]]) -> None:
        """The request saw these (key, end token) for the first time: a load or a store offer."""

    @abstractmethod
    def insert(self, key: int, chunk: StoredChunk, position: int) -> None: ...

    @abstractmethod
    def evict(self, n: int, protected: set[int]) -> list[tuple[int, StoredChunk]] | None: ...

    @abstractmethod
    def finish(self, keys: Sequence[int], inserted_only: set[int], reused: set[int]) -> None:
        """The request ended; ``keys`` is every key it saw, head to tail."""
