"""An offload tier: LMCache's local CPU (or disk) backend, a store of KV chunks with a capacity in tokens.

Chunks are keyed by a prefix-chained hash. Policies: ``lru`` (LMCache's: a
retrieval moves the chunk to the back, eviction from the front), ``fifo``
(retrievals change nothing) and ``mru`` (evict the most recently used).
Invariant: ``used_tokens <= capacity_tokens`` and equals the sum of the
stored chunks' tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Literal, NamedTuple

ChunkPolicy = Literal["lru", "fifo", "mru"]
CHUNK_POLICIES: tuple[ChunkPolicy, ...] = ("lru", "fifo", "mru")


class StoredChunk(NamedTuple):
    doc: int
    index: int  # position of the chunk in its prompt
    tokens: int


class ChunkStore:
    """A capacity-bound chunk store; ``put`` evicts by policy to make room."""

    def __init__(self, name: str, capacity_tokens: int, chunk_size: int, policy: ChunkPolicy = "lru") -> None:
        if capacity_tokens < 1:
            raise ValueError(f"{name} tier capacity must be at least 1 token, got {capacity_tokens}")
        if policy not in CHUNK_POLICIES:
            raise ValueError(f"unknown {name} policy {policy!r}; known: {', '.join(CHUNK_POLICIES)}")
        self.name = name
        self.capacity_tokens = capacity_tokens
        self.chunk_size = chunk_size
        self.policy = policy
        self.used_tokens = 0
        self.chunks: OrderedDict[int, StoredChunk] = OrderedDict()
        self.doc_tokens: dict[int, int] = {}

    def __contains__(self, key: int) -> bool:
        return key in self.chunks

    def touch(self, keys: Sequence[int]) -> None:
        """Chunks were retrieved: under LRU and MRU they become the most recently used."""
        if self.policy == "fifo":
            return
        move = self.chunks.move_to_end
        for key in keys:
            move(key)

    def put(self, key: int, chunk: StoredChunk, evicted: list[StoredChunk]) -> bool:
        """Store a chunk unless present or larger than the tier; evicted chunks are appended to ``evicted``."""
        if key in self.chunks or chunk.tokens > self.capacity_tokens:
            return False
        chunks = self.chunks
        while self.used_tokens + chunk.tokens > self.capacity_tokens:
            _, old = chunks.popitem(last=self.policy == "mru")
            self.used_tokens -= old.tokens
            self.doc_tokens[old.doc] -= old.tokens
            evicted.append(old)
        chunks[key] = chunk
        self.used_tokens += chunk.tokens
        self.doc_tokens[chunk.doc] = self.doc_tokens.get(chunk.doc, 0) + chunk.tokens
        return True
