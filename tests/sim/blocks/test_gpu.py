"""The GPU block pool: exact free-queue states after small scenarios, as vLLM's own tests do."""

from __future__ import annotations

import pytest

from sim.blocks.pool import GpuBlockPool


def _serve(pool: GpuBlockPool, keys: list[int], prompt_blocks: int, doc: int = 0) -> tuple[int, dict]:
    """Run one request: returns (hit blocks, evictions)."""
    evictions: dict = {}
    hits = pool.find_prefix(keys, len(keys))
    pool.touch(hits)
    blocks = hits + pool.allocate(prompt_blocks - len(hits), evictions)
    pool.cache_blocks(blocks, keys, len(hits), doc, 0)
    pool.free(blocks)
    return len(hits), evictions


def test_null_block_is_never_handed_out() -> None:
    pool = GpuBlockPool(num_blocks=4, block_size=16)
    assert pool.capacity_blocks == 3
    assert list(pool.free_queue) == [1, 2, 3]
    with pytest.raises(ValueError):
        pool.allocate(4, {})


def test_blocks_return_tail_first_and_unhashed_blocks_go_to_the_front() -> None:
    pool = GpuBlockPool(num_blocks=6, block_size=16)
    # A prompt of 2 full blocks and a partial third: blocks 1, 2 hashed, 3 not.
    _serve(pool, [101, 102], prompt_blocks=3)
    # Free queue: untouched 4, 5 first; then the partial block 3 moved to the front;
    # the hashed blocks appended tail first (2 then 1), so the head (1) is evicted last.
    assert list(pool.free_queue) == [3, 4, 5, 2, 1]


def test_legacy_order_appends_every_block_tail_first() -> None:
    pool = GpuBlockPool(num_blocks=6, block_size=16, free_order="vllm-legacy")
    _serve(pool, [101, 102], prompt_blocks=3)
    assert list(pool.free_queue) == [4, 5, 3, 2, 1]


def test_tail_is_evicted_before_head_and_a_prefix_still_hits() -> None:
    pool = GpuBlockPool(num_blocks=5, block_size=16)  # 4 usable
    _serve(pool, [1, 2, 3], prompt_blocks=3, doc=0)  # doc 0 in blocks 1, 2, 3
    # Doc 1 needs 2 blocks: block 4 (never used), then block 3 = doc 0's tail.
    hits, evicted = _serve(pool, [11, 12], prompt_blocks=2, doc=1)
    assert hits == 0
    assert evicted == {0: [1, 2, 2]}  # one block, position 2 (the tail)
    # Doc 0 again: its first two blocks are still cached.
    hits, _ = _serve(pool, [1, 2, 3], prompt_blocks=3, doc=0)
    assert hits == 2


def test_cyclic_reuse_never_hits_until_one_block_of_the_next_head_survives() -> None:
    docs = {d: [10 * d + 1, 10 * d + 2] for d in range(3)}  # three 2-block documents

    def last_pass_hits(usable: int) -> list[int]:
        pool = GpuBlockPool(num_blocks=usable + 1, block_size=16)
        for _ in range(3):
            hits = [_serve(pool, keys, 2, d)[0] for d, keys in docs.items()]
        return hits

    # 4 usable blocks = 2 documents: each miss evicts the next document needed.
    assert last_pass_hits(4) == [0, 0, 0]
    # 5 usable blocks: after a pass the oldest document keeps its head block (tails go
    # first), so every request hits one block and computes one, evicting the next
    # document's tail only.
    assert last_pass_hits(5) == [1, 1, 1]


def test_recomputed_last_block_is_a_copy_not_a_new_store() -> None:
    pool = GpuBlockPool(num_blocks=8, block_size=16)
    _serve(pool, [1, 2], prompt_blocks=2)
    # The same prompt again, where vLLM may hit only the first block (last token recomputed).
    evictions: dict = {}
    hits = pool.find_prefix([1, 2], 1)
    pool.touch(hits)
    blocks = hits + pool.allocate(1, evictions)
    stored = pool.cache_blocks(blocks, [1, 2], 1, 0, 0)
    pool.free(blocks)
    assert stored == {}  # block 2's hash was already cached: a second copy
    assert pool.cached_blocks == 2
    assert pool.doc_blocks[0] == 2
