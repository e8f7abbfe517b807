"""The free queue over blocks made on first use: the same order as vLLM's queue built up front, at a cost that follows use."""

from __future__ import annotations

import random

import pytest

from sim.blocks.free_queue import FreeBlockQueue, FreshBlocks
from sim.blocks.policies import GPU_POLICY_NAMES, free_queue
from sim.blocks.pool import GpuBlockPool


class _Table:
    """The block table a policy may read (only ``append`` looks at hashes): every block holds a hash here."""

    def __init__(self, size: int) -> None:
        self.block_hash: list[int | None] = list(range(size))
        self.block_pos: list[int] = [0] * size


def _drive(queue, ops: list[tuple[str, int]], rng_seed: int, hit_prepended: bool = True) -> list[list[int]]:
    """Apply the same random pops, frees and hits to a queue; returns every block list handed out, and the final order.

    A prepended block holds nothing (vLLM prepends only blocks without a hash), so it can be hit only where
    the queue does not care (``hit_prepended``: LRU keeps one list).
    """
    rng = random.Random(rng_seed)
    held: list[int] = []
    hittable: dict[int, None] = {}  # freed blocks still in the queue that a prefix hit may take
    out: list[list[int]] = []
    for op, n in ops:
        if op == "pop" and n <= len(queue):
            got = queue.popleft_n(n)
            out.append(got)
            held += got
            for b in got:
                hittable.pop(b, None)
        elif op in ("append", "prepend") and held:
            give = held[:n]
            del held[:n]
            getattr(queue, op)(give)
            if op == "append" or hit_prepended:
                hittable.update(dict.fromkeys(give))
        elif op == "hit" and hittable:
            take = rng.sample(sorted(hittable), min(n, len(hittable)))
            queue.remove(take)
            for b in take:
                del hittable[b]
            held += take
    out.append(list(queue))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_a_lazy_queue_hands_out_blocks_in_the_same_order_as_one_built_up_front(seed: int) -> None:
    # vLLM's FreeKVCacheBlockQueue starts as every block in id order (block_pool.py builds it from all blocks);
    # a queue over FreshBlocks must give the same blocks in the same order under any sequence of operations.
    rng = random.Random(seed)
    ops = [(rng.choice(["pop", "pop", "append", "prepend", "hit"]), rng.randint(1, 6)) for _ in range(200)]
    eager = FreeBlockQueue(range(1, 40))
    lazy = FreeBlockQueue(FreshBlocks(1, 40))
    assert _drive(lazy, ops, seed) == _drive(eager, ops, seed)


@pytest.mark.parametrize("policy", [p for p in GPU_POLICY_NAMES if p != "belady"])
@pytest.mark.parametrize("seed", range(5))
def test_every_policy_orders_fresh_blocks_as_it_orders_a_list_of_them(policy: str, seed: int) -> None:
    rng = random.Random(seed)
    ops = [(rng.choice(["pop", "append", "prepend", "hit"]), rng.randint(1, 5)) for _ in range(150)]
    table = _Table(40)
    eager = free_queue(policy, range(1, 40), table)
    lazy = free_queue(policy, FreshBlocks(1, 40), table)
    assert _drive(lazy, ops, seed, hit_prepended=False) == _drive(eager, ops, seed, hit_prepended=False)


def test_a_huge_pool_serving_one_small_prompt_holds_only_the_blocks_it_used() -> None:
    # 10^8 blocks, as a GPU with 1e8 tokens of KV cache at block size 1; one prompt of 3 blocks.
    pool = GpuBlockPool(num_blocks=100_000_000, block_size=1)
    blocks = pool.allocate(3, {})
    assert blocks == [1, 2, 3]  # block 0 is the null block; the lowest free ids come first, as in vLLM
    pool.cache_blocks(blocks, [11, 12, 13], 0, doc=0, shared_blocks=0)
    pool.free(blocks, 3)
    # Tables exist for the null block and the three used blocks only.
    assert len(pool.block_hash) == len(pool.block_doc) == len(pool.block_pos) == 4
    assert len(pool.free_queue) == pool.capacity_blocks == 99_999_999
    # Never-used blocks are reused before any cached one is evicted: the next allocation is block 4.
    assert pool.allocate(1, {}) == [4]
