"""An offload tier: LMCache's local CPU (or disk) backend, a store of KV chunks with a capacity in tokens.

Chunks are keyed by a prefix-chained hash. Which chunk goes when room is
needed is the tier's eviction policy (``sim.tiers.policies``: LMCache's
``lru``, ``fifo``, ``lfu``, ``mru``; libCacheSim's ``s3fifo`` and ``arc``).
Invariant: ``used_tokens <= capacity_tokens`` and equals the sum of the
stored chunks' tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

from sim.tiers.policies import CHUNK_POLICY_NAMES, chunk_policy
from sim.tiers.policies.base import DOC, INDEX, TOKENS, StoredChunk
from sim.tiers.policies.base import ChunkPolicy as PolicyBase

__all__ = ["CHUNK_POLICIES", "DEFAULT_CPU_BACKEND", "DOC", "INDEX", "TOKENS", "ChunkPolicy", "ChunkStore", "StoredChunk"]

ChunkPolicy = Literal[CHUNK_POLICY_NAMES]  # type: ignore[valid-type]  # the registry's names
CHUNK_POLICIES: tuple[str, ...] = CHUNK_POLICY_NAMES

# Whose rules the offload tiers follow: LMCache 0.5.6's own code (the default), vLLM 0.33's own
# OffloadingConnector (sim.tiers.native), or the seed brief's three simplified rules (kept for teaching).
CpuBackend = Literal["lmcache", "vllm-native", "brief"]
CPU_BACKENDS: tuple[CpuBackend, ...] = get_args(CpuBackend)
DEFAULT_CPU_BACKEND: CpuBackend = "lmcache"  # scenarios, trace replays, the CLI and the page alike


class ChunkStore:
    """A capacity-bound chunk store; ``put`` evicts by policy to make room."""

    def __init__(self, name: str, capacity_tokens: int, chunk_size: int, policy: str = "lru") -> None:
        if capacity_tokens < 1:
            raise ValueError(f"{name} tier capacity must be at least 1 token, got {capacity_tokens}")
        self.name = name
        self.capacity_tokens = capacity_tokens
        self.chunk_size = chunk_size
        self.policy = policy
        self.eviction = chunk_policy(policy, capacity_tokens)
        cls = type(self.eviction)
        # A policy that needs no notice of a put (LRU, FIFO, MRU): the hot loop writes its map directly.
        self._plain_puts = cls.admit is PolicyBase.admit and cls.insert is PolicyBase.insert
        self.used_tokens = 0
        self.doc_tokens: dict[int, int] = {}
        # When a list, (stored?, key) for every chunk stored or evicted, in order (a KV event publisher reads it).
        self.journal: list[tuple[bool, int]] | None = None
        # An observer's (sim.explain): key -> the seq whose store evicted it last (a dict, or a list indexed by
        # key); the observer sets the seq.
        self.eviction_log: dict[int, int] | list[int | None] | None = None
        self.eviction_seq = -1

    @property
    def chunks(self) -> dict[int, StoredChunk]:
        """Every held chunk by key (the policy's map: read it, never write it)."""
        return self.eviction.chunks

    def __contains__(self, key: int) -> bool:
        return key in self.eviction.chunks

    def prefix(self, keys: Sequence[int], start: int = 0) -> int:
        """How many of ``keys`` from ``start`` on the tier holds, up to the first it lacks (a prefix match)."""
        chunks = self.eviction.chunks
        found = start
        for key in keys[start:] if start else keys:
            if key not in chunks:
                break
            found += 1
        return found - start

    def touch(self, keys: Sequence[int]) -> None:
        """Chunks were retrieved, first to last (the brief: only the chunks loaded)."""
        if keys:
            self.eviction.hits(keys)

    def touch_reversed(self, keys: Sequence[int]) -> None:
        """A lookup hit these chunks: LMCache refreshes them last first, so the first chunk ends most recent.

        LMCache's ``contains(pin=True)`` collects every hit key
        (``local_cpu_backend.py`` 127-135) and ``touch_cache`` then calls the
        policy's ``update_on_hit`` over them in reverse (137-142), right after the
        lookup (``cache_engine.py`` 1271-1276).
        """
        if keys:
            self.eviction.hits(reversed(keys))

    def store_reserving(
        self, items: Sequence[tuple[int, StoredChunk]], evicted: list[StoredChunk]
    ) -> tuple[dict[int, int], list[tuple[int, StoredChunk]]]:
        """LMCache's store: reserve memory for every chunk first (evicting to make room), then put the new ones.

        ``cache_engine.py`` 489-530 allocates a memory object per chunk of the
        store mask before anything is put; ``local_cpu_backend.py`` 680-735
        evicts the policy's candidates until the allocation fits, and gives up
        (the store keeps the chunks allocated so far, 518-526) when nothing is
        left to evict. Only then ``batched_put`` reaches ``submit_put_task``,
        which skips a key already held (162-164) and frees its reservation
        (``storage_manager.py`` 433-435). So a chunk the tier already holds still
        costs an allocation that can evict another chunk, and the copy from GPU
        is made for every allocated chunk (``cache_engine.py`` 568-569).

        Returns the tokens newly stored per document and the chunks allocated
        (copied out of the GPU, and passed on to the tiers behind: a store cut
        short by a full tier reaches them cut short too). Capacity is counted
        in tokens, without the allocator's fragmentation.
        """
        policy = self.eviction
        chunks, capacity, evict = policy.chunks, self.capacity_tokens, policy.evict
        used = self.used_tokens
        reserved = count = 0
        for _, chunk in items:
            tokens = chunk[TOKENS]
            while used + reserved + tokens > capacity and chunks:
                used -= self._forget(*evict(), evicted)
            if used + reserved + tokens > capacity:
                break
            reserved += tokens
            count += 1
        self.used_tokens = used
        allocated = list(items[:count])
        # The reservations made room for every allocated chunk, so these puts evict nothing.
        return self.put_many(allocated, evicted), allocated

    def _forget(self, key: int, chunk: StoredChunk, evicted: list[StoredChunk]) -> int:
        """Account for a chunk the policy evicted (journal, eviction log, per-document tokens); returns its tokens."""
        if self.journal is not None:
            self.journal.append((False, key))
        if self.eviction_log is not None:
            self.eviction_log[key] = self.eviction_seq
        tokens = chunk[TOKENS]
        self.doc_tokens[chunk[DOC]] -= tokens
        evicted.append(chunk)
        return tokens

    def put(self, key: int, chunk: StoredChunk, evicted: list[StoredChunk]) -> bool:
        """Store a chunk unless present or larger than the tier; evicted chunks are appended to ``evicted``."""
        return bool(self.put_many([(key, chunk)], evicted))

    def put_many(self, items: Sequence[tuple[int, StoredChunk]], evicted: list[StoredChunk]) -> dict[int, int]:
        """Store chunks in order, skipping present ones; returns the tokens newly stored per document."""
        policy = self.eviction
        chunks, doc_tokens, capacity = policy.chunks, self.doc_tokens, self.capacity_tokens
        admit, insert, evict, plain = policy.admit, policy.insert, policy.evict, self._plain_puts
        used = self.used_tokens
        journal = self.journal
        added: dict[int, int] = {}
        for key, chunk in items:
            tokens = chunk[TOKENS]
            if key in chunks or tokens > capacity:
                continue
            if not plain:
                admit(key, tokens)
            while used + tokens > capacity:
                used -= self._forget(*evict(), evicted)
            if plain:
                chunks[key] = chunk
            else:
                insert(key, chunk)
            if journal is not None:
                journal.append((True, key))
            used += tokens
            doc = chunk[DOC]
            doc_tokens[doc] = doc_tokens.get(doc, 0) + tokens
            added[doc] = added.get(doc, 0) + tokens
        self.used_tokens = used
        return added
