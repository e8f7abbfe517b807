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
from typing import Literal

ChunkPolicy = Literal["lru", "fifo", "mru"]
CHUNK_POLICIES: tuple[ChunkPolicy, ...] = ("lru", "fifo", "mru")


# (doc, position of the chunk in its prompt, tokens): a plain tuple, as a store
# of a large trace makes one per chunk and a named tuple costs ten times more.
StoredChunk = tuple[int, int, int]
DOC, INDEX, TOKENS = 0, 1, 2


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
        # When a list, (stored?, key) for every chunk stored or evicted, in order (a KV event publisher reads it).
        self.journal: list[tuple[bool, int]] | None = None
        # An observer's (sim.explain): key -> the seq whose store evicted it last; the observer sets the seq.
        self.eviction_log: dict[int, int] | None = None
        self.eviction_seq = -1

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
        return bool(self.put_many([(key, chunk)], evicted))

    def put_many(self, items: Sequence[tuple[int, StoredChunk]], evicted: list[StoredChunk]) -> dict[int, int]:
        """Store chunks in order, skipping present ones; returns the tokens newly stored per document."""
        chunks, doc_tokens, capacity = self.chunks, self.doc_tokens, self.capacity_tokens
        from_back = self.policy == "mru"
        used = self.used_tokens
        journal = self.journal
        log, seq = self.eviction_log, self.eviction_seq
        added: dict[int, int] = {}
        for key, chunk in items:
            tokens = chunk[TOKENS]
            if key in chunks or tokens > capacity:
                continue
            while used + tokens > capacity:
                old_key, old = chunks.popitem(last=from_back)
                if journal is not None:
                    journal.append((False, old_key))
                if log is not None:
                    log[old_key] = seq
                used -= old[TOKENS]
                doc_tokens[old[DOC]] -= old[TOKENS]
                evicted.append(old)
            chunks[key] = chunk
            if journal is not None:
                journal.append((True, key))
            used += tokens
            doc = chunk[DOC]
            doc_tokens[doc] = doc_tokens.get(doc, 0) + tokens
            added[doc] = added.get(doc, 0) + tokens
        self.used_tokens = used
        return added
