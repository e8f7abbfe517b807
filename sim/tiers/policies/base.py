"""The one interface every offload-tier eviction policy implements, and the chunk a tier stores.

Modelled on LMCache's ``BaseCachePolicy`` (``lmcache/v1/storage_backend/
cache_policy/base_policy.py``: a mapping the policy creates, update on hit, on
put, on eviction) and libCacheSim's (find, insert, evict): the tier owns the
capacity and asks the policy

- ``hits(keys)``: these held chunks were hit, in the order the tier refreshes them;
- ``admit(key, tokens)``: a chunk the tier lacks is about to be stored (before room is made);
- ``insert(key, chunk)``: store it (there is room);
- ``evict()``: remove the next victim and return it.

``chunks`` maps every held key to its chunk; the tier reads it for lookups and
never writes it. Invariant: ``chunks`` holds exactly what was inserted and not evicted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import ClassVar

# (doc, position of the chunk in its prompt, tokens): a plain tuple, as a store
# of a large trace makes one per chunk and a named tuple costs ten times more.
StoredChunk = tuple[int, int, int]
DOC, INDEX, TOKENS = 0, 1, 2


class ChunkPolicy(ABC):
    """Decides which chunk an offload tier evicts; one subclass per policy, registered by ``name``."""

    name: ClassVar[str]
    origin: ClassVar[str]  # whose implementation it follows, with file and line
    # LMCACHE_CACHE_POLICY's value for it; None where LMCache 0.5.6 has no such policy (its POLICY_MAPPING,
    # cache_policy/__init__.py 13-18, raises ValueError on any other name, 36-45).
    lmcache_name: ClassVar[str | None] = None

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = capacity_tokens
        self.chunks: dict[int, StoredChunk] = {}

    @abstractmethod
    def hits(self, keys: Iterable[int]) -> None: ...

    def admit(self, key: int, tokens: int) -> None:
        """Most policies need no notice before an insert; S3-FIFO and ARC read their ghosts here."""

    def insert(self, key: int, chunk: StoredChunk) -> None:
        self.chunks[key] = chunk

    @abstractmethod
    def evict(self) -> tuple[int, StoredChunk]: ...
