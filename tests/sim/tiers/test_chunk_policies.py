"""The offload tiers' eviction policies: each against libCacheSim where it has the policy, by hand where not.

The reference runs are libCacheSim's own C simulators (the ``libcachesim``
package) on plain object traces: one object per chunk, every object of size 1,
a cache of C bytes holding C chunks, no prefix chains. kvscope's tier is driven
the same way: a key it holds is a hit (refreshed), any other is stored.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import get_args

import pytest

from app.cli.scenario_flags import FLAGS
from bench import _libcachesim
from sim.tiers.chunk_store import ChunkStore
from sim.tiers.policies import CHUNK_POLICY_NAMES, POLICIES, chunk_policy
from sim.workloads.scenario import Scenario, StorageTier


def misses(policy: str, stream: list[int], capacity: int) -> int:
    store = ChunkStore("t", capacity, 1, policy)
    count = 0
    for key in stream:
        if key in store:
            store.touch([key])
        else:
            count += 1
            store.put(key, (0, 0, 1), [])
    return count


def traces() -> list[list[int]]:
    """Fixed, skewed object traces: Pareto-distributed ids over 20 to 60 objects, 200 to 1,500 requests."""
    rng = random.Random(1)
    out = []
    for _ in range(12):
        n = rng.randint(20, 60)
        out.append([int(rng.paretovariate(1.2)) % n + 1 for _ in range(rng.randint(200, 1500))])
    return out


# libCacheSim's name for each policy it shares with kvscope. It has no MRU.
REFERENCE = {"lru": "LRU", "fifo": "FIFO", "lfu": "LFU", "s3fifo": "S3FIFO", "arc": "ARC"}


@pytest.mark.skipif(_libcachesim.available() is None, reason="libcachesim is not installed (pip install 'kvscope[bench]')")
@pytest.mark.parametrize("policy", sorted(REFERENCE))
def test_miss_counts_equal_libcachesim(policy: str) -> None:
    # S3-FIFO from 20 chunks: its small FIFO (10%) must hold more than one chunk, or libCacheSim
    # refuses every new object while kvscope stores it in main (sim/tiers/policies/s3fifo.py).
    for i, stream in enumerate(traces()):
        for capacity, theirs in reference_misses(REFERENCE[policy], stream).items():
            assert misses(policy, stream, capacity) == theirs, (policy, i, capacity)


CAPACITIES = (20, 25, 47, 64, 100)


def reference_misses(name: str, stream: list[int], capacities: tuple[int, ...] = CAPACITIES) -> dict[int, int]:
    """libCacheSim's policy ``name`` (its class: ``LRU``, ``S3FIFO``) over the stream, as misses per capacity."""
    import libcachesim as lcs

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.bin"
        _libcachesim.write_oracle_general(stream, path)
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        for capacity in capacities:
            reader.reset()
            miss_ratio, _ = getattr(lcs, name)(cache_size=capacity, hashpower=12).process_trace(reader)
            out[capacity] = round(miss_ratio * len(stream))
    return out


def test_mru_evicts_the_most_recently_stored_or_hit() -> None:
    # LMCache's MRU (cache_policy/mru.py 24-61): a hit moves the key to the back, eviction takes the back.
    # Capacity 3: a b c stored; a hit -> order b c a; d evicts a (the back) -> b c d; e evicts d.
    store = ChunkStore("t", 3, 1, "mru")
    evicted: list = []
    for i, key in enumerate((1, 2, 3)):
        store.put(key, (0, i, 1), evicted)
    store.touch([1])
    store.put(4, (0, 3, 1), evicted)
    store.put(5, (0, 4, 1), evicted)
    assert list(store.chunks) == [2, 3, 5] and [c[1] for c in evicted] == [0, 3]


def test_lfu_breaks_ties_by_arrival_in_the_frequency() -> None:
    # LMCache's LFU (cache_policy/lfu.py 38-105): a b c stored at frequency 1; b hit twice, a once:
    # buckets 1: [c], 2: [a], 3: [b]. d evicts c (lowest); then e: buckets 1: [d], 2: [a], 3: [b]
    # evicts d, the newest, as the only one at 1: LFU keeps the often-hit ones over a newcomer.
    store = ChunkStore("t", 3, 1, "lfu")
    evicted: list = []
    for i, key in enumerate((1, 2, 3)):
        store.put(key, (0, i, 1), evicted)
    store.touch([2, 2, 1])
    store.put(4, (0, 3, 1), evicted)
    store.put(5, (0, 4, 1), evicted)
    assert sorted(store.chunks) == [1, 2, 5] and [c[1] for c in evicted] == [2, 3]


def test_every_policy_keeps_the_tier_within_capacity_and_its_map_exact() -> None:
    # Variable chunk sizes (a partial last chunk), every policy: used tokens equal what is held.
    rng = random.Random(7)
    for name in CHUNK_POLICY_NAMES:
        store = ChunkStore("t", 40, 4, name)
        for _ in range(2000):
            key = rng.randint(1, 30)
            if key in store:
                store.touch([key])
            else:
                store.put(key, (key % 3, 0, 4 if key % 5 else 3), [])
            assert store.used_tokens == sum(c[2] for c in store.chunks.values()) <= 40, name


def test_one_registry_names_the_policies_everywhere() -> None:
    assert set(POLICIES) == {"lru", "fifo", "lfu", "mru", "s3fifo", "arc"}
    assert get_args(Scenario.model_fields["cpu_policy"].annotation) == CHUNK_POLICY_NAMES
    assert get_args(StorageTier.model_fields["policy"].annotation) == CHUNK_POLICY_NAMES
    flag = next(kind for name, _, kind, _ in FLAGS if name == "--cpu-policy")
    assert tuple(flag.choices) == CHUNK_POLICY_NAMES
    with pytest.raises(ValueError, match="unknown chunk policy 'lirs'; known: lru, fifo, lfu, mru, s3fifo, arc"):
        chunk_policy("lirs", 10)
