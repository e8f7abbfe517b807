"""The GPU tier: vLLM v1's prefix-caching block pool, reduced to what decides prefix hits and evictions.

Invariants (asserted where they can break):
- block 0 is the null block when reserved: never handed out, never cached;
- a block is either free (in the free queue) or held by the running request;
- ``cached`` maps a block hash to one block holding it; further copies of the
  same hash (vLLM recomputes the last block of a fully cached prompt) are in
  ``_copies``, and dropping a copy is not an eviction;
- ``doc_blocks`` counts the distinct cached blocks of each document.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from sim.blocks.free_queue import FreshBlocks
from sim.blocks.policies import FreeQueue, free_queue

FreeOrder = Literal["vllm", "vllm-legacy"]
# What the GPU caches: 16-token blocks as vLLM does, or whole documents (the lab's first exercise).
Granularity = Literal["block", "doc"]

# doc -> [blocks evicted, first block position, last block position]
Evictions = dict[int, list[int]]


class GpuBlockPool:
    """Blocks of ``block_size`` tokens; ``num_blocks`` as vLLM logs them (``GPU KV cache size`` / block size)."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        free_order: FreeOrder = "vllm",
        reserve_null_block: bool = True,
        policy: str = "lru",
    ) -> None:
        first = 1 if reserve_null_block else 0
        if num_blocks - first < 1:
            raise ValueError(f"a GPU tier needs at least {first + 1} blocks, got {num_blocks}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_order = free_order
        self.null_block = 0 if reserve_null_block else None
        # Per-block tables, grown as blocks are first handed out (``_grow``): a huge pool that a
        # small workload uses costs what it uses.
        self.block_hash: list[int | None] = [None] * first
        self.block_doc: list[int] = [0] * first
        self.block_pos: list[int] = [0] * first
        self.cached: dict[int, int] = {}
        self._copies: dict[int, list[int]] = {}
        self.doc_blocks: dict[int, int] = {}
        # An observer's (sim.explain): hash -> the seq whose allocation evicted it last (a dict, or a list indexed
        # by hash when hashes are small ids); the observer sets the seq.
        self.eviction_log: dict[int, int] | list[int | None] | None = None
        self.eviction_seq = -1
        self.policy = policy
        # When a list, every hash a reused block dropped is appended, copies too (a KV event publisher reads it).
        self.dropped_keys: list[int] | None = None
        # LRU is vLLM's FreeBlockQueue itself; other policies are what-ifs (sim.blocks.policies).
        self.free_queue: FreeQueue = free_queue(policy, FreshBlocks(first, num_blocks, self._grow), self)

    def _grow(self, high: int) -> None:
        """Blocks below ``high`` now exist: give them table entries (ids are handed out lowest first)."""
        more = high - len(self.block_hash)
        if more > 0:
            self.block_hash.extend([None] * more)
            self.block_doc.extend([0] * more)
            self.block_pos.extend([0] * more)

    @property
    def capacity_blocks(self) -> int:
        return self.num_blocks - (self.null_block is not None)

    @property
    def cached_blocks(self) -> int:
        return len(self.cached)

    def find_prefix(self, keys: Sequence[int], max_blocks: int) -> list[int]:
        """Blocks holding the longest cached prefix of ``keys``, at most ``max_blocks``."""
        cached = self.cached
        hits: list[int] = []
        for i in range(min(max_blocks, len(keys))):
            block_id = cached.get(keys[i])
            if block_id is None:
                break
            hits.append(block_id)
        return hits

    def touch(self, block_ids: Sequence[int]) -> None:
        """A prefix hit: the blocks leave the free queue while the request uses them."""
        self.free_queue.remove(block_ids)

    def allocate(self, n: int, evictions: Evictions) -> list[int]:
        """Pop ``n`` blocks from the front of the free queue, evicting what they held into ``evictions``."""
        block_ids = self.free_queue.popleft_n(n)
        block_hash, block_doc, block_pos = self.block_hash, self.block_doc, self.block_pos
        cached, copies, doc_blocks = self.cached, self._copies, self.doc_blocks
        dropped = self.dropped_keys
        log, seq = self.eviction_log, self.eviction_seq
        # The hot loop of a cache that is too small: kept inline, one pass per block.
        for block_id in block_ids:
            key = block_hash[block_id]
            if key is None:
                continue
            block_hash[block_id] = None
            if dropped is not None:
                dropped.append(key)
            if key in copies or cached[key] != block_id:
                self._drop_copy(key, block_id)
                continue
            del cached[key]
            if log is not None:
                log[key] = seq
            doc, pos = block_doc[block_id], block_pos[block_id]
            doc_blocks[doc] -= 1
            seen = evictions.get(doc)
            if seen is None:
                evictions[doc] = [1, pos, pos]
            else:
                seen[0] += 1
                if pos < seen[1]:
                    seen[1] = pos
                elif pos > seen[2]:
                    seen[2] = pos
        return block_ids

    def _drop_copy(self, key: int, block_id: int) -> None:
        """A block holding a hash that another block also holds was reused: no data is lost."""
        copies = self._copies[key]
        if self.cached[key] == block_id:
            self.cached[key] = copies.pop()
        else:
            copies.remove(block_id)
        if not copies:
            del self._copies[key]

    def cache_blocks(self, block_ids: Sequence[int], keys: Sequence[int], start: int, doc: int, shared_blocks: int) -> dict[int, int]:
        """Give blocks ``start..len(keys)`` their hashes; returns new distinct blocks per document.

        The first ``shared_blocks`` blocks belong to a shared prefix (owner -1), the rest to ``doc``.
        """
        cached, block_hash, block_doc, block_pos = self.cached, self.block_hash, self.block_doc, self.block_pos
        stored: dict[int, int] = {}
        end = len(keys)
        for lo, hi, owner in ((start, min(shared_blocks, end), -1), (max(start, shared_blocks), end, doc)):
            new = 0
            for i in range(lo, hi):
                block_id, key = block_ids[i], keys[i]
                block_hash[block_id] = key
                block_doc[block_id] = owner
                block_pos[block_id] = i
                if key in cached:
                    self._copies.setdefault(key, []).append(block_id)
                else:
                    cached[key] = block_id
                    new += 1
            if new:
                stored[owner] = new
                self.doc_blocks[owner] = self.doc_blocks.get(owner, 0) + new
        return stored

    def free(self, block_ids: Sequence[int], num_hashed: int | None = None) -> None:
        """A request finished: its blocks (in prompt order) return to the free queue.

        vLLM frees them tail first so that a document's tail is evicted before
        its head. Current vLLM puts blocks without a hash (the partial last
        block) at the front, to be reused first; older vLLM appended them with
        the rest (``vllm-legacy``). A caller that knows the first
        ``num_hashed`` blocks are the hashed ones says so, sparing a scan.
        """
        if self.free_order == "vllm-legacy":
            self.free_queue.append(block_ids[::-1])
            return
        if num_hashed is None:
            block_hash = self.block_hash
            ordered = block_ids[::-1]
            self.free_queue.prepend([b for b in ordered if block_hash[b] is None])
            self.free_queue.append([b for b in ordered if block_hash[b] is not None])
            return
        if num_hashed < len(block_ids):
            self.free_queue.prepend(block_ids[num_hashed:][::-1])
        self.free_queue.append(block_ids[num_hashed - 1 :: -1] if num_hashed else [])
