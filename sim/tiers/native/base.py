"""The interface of vLLM's offloading cache policies, and one request's cache access as the manager keeps it.

vLLM's ``CachePolicy`` (``vllm/v1/kv_offload/cpu/policies/base.py`` 48-160):
``get``, ``insert``, ``evict(n, protected)`` (atomic: all ``n`` or nothing,
134-145), ``on_store_miss`` (85-94), ``on_request_access`` (96-107) and
``on_request_finished`` (109-131). A chunk is pinned while a transfer uses it
(``ChunkStatus.ref_cnt``, 25-45: -1 while its store is in flight, above 0
while loads read it); only a chunk at 0 is evictable. The tier passes the
chunks that are not (``sim.tiers.native.tier``) in ``protected`` together
with the store's own offer (``cpu/manager.py`` 331-334).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from sim.tiers.policies.base import StoredChunk


@dataclass(slots=True, eq=False)
class RequestAccess:
    """The cache keys one request observed (``_RequestCacheAccess``, ``cpu/manager.py`` 35-46), and its LRU rank.

    ``seen`` maps each key to its end token (its offload key position);
    ``rank`` is the request's LRU rank, drawn at its first access
    (``lru.py`` 51-61), None before.
    """

    seen: dict[int, int] = field(default_factory=dict)
    inserted: set[int] = field(default_factory=set)
    reused: set[int] = field(default_factory=set)
    missed: set[int] = field(default_factory=set)
    rank: int | None = None
    finished: bool = False


class NativePolicy(ABC):
    """One of vLLM's offloading cache policies; ``chunks`` maps every held key to its chunk (the tier reads it)."""

    name: ClassVar[str]
    origin: ClassVar[str]

    def __init__(self, capacity_chunks: int) -> None:
        self.capacity_chunks = capacity_chunks
        self.chunks: dict[int, StoredChunk] = {}

    def store_miss(self, keys: Sequence[int]) -> None:
        """Chunks a store is about to insert were missing (ARC reads its ghosts here)."""

    def access(self, keys: Iterable[tuple[int, int]], request: RequestAccess) -> None:
        """The request saw these (key, end token) for the first time: a load or a store offer."""

    @abstractmethod
    def insert(self, key: int, chunk: StoredChunk, position: int, request: RequestAccess) -> None: ...

    @abstractmethod
    def evict(self, n: int, protected: set[int]) -> list[tuple[int, StoredChunk]] | None: ...

    @abstractmethod
    def finish(self, keys: Sequence[int], inserted_only: set[int], reused: set[int], request: RequestAccess) -> None:
        """The request ended; ``keys`` is every key it saw, head to tail."""
