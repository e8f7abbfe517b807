"""The ``vllm-native`` backend does what vLLM 0.33's OffloadingConnector does, rule by rule, derived by hand.

Files cited: ``scheduler.py`` is ``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``,
``manager.py`` ``vllm/v1/kv_offload/cpu/manager.py``, ``lru.py``/``arc.py`` ``vllm/v1/kv_offload/cpu/policies/``,
``spec.py`` ``vllm/v1/kv_offload/cpu/spec.py``. Blocks are 16 tokens throughout.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from bench import _libcachesim
from sim.blocks.request import Request
from sim.engine.loop import Engine
from sim.simulation.run import simulate, tier_spec
from sim.tiers.native.arc import NativeArc
from sim.tiers.native.tier import NativeCpuTier
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario
from tests.sim.tiers.test_chunk_policies import reference_misses, traces

B = 16


def _req(keys: list[int], tokens: int | None = None, bpc: int = 1, doc: int = 0) -> Request:
    """A prompt of ``tokens`` (default: exactly its full blocks) whose full blocks have these keys."""
    n = tokens if tokens is not None else len(keys) * B
    return Request(0, 1, "forward", doc, n, keys, -(-n // B), (n - 1) // B, keys[bpc - 1 :: bpc], B * bpc)


def _serve(tier: NativeCpuTier, req: Request, gpu_hit: int = 0) -> tuple[int, list[int], int]:
    """One request: lookup (and load), then its stores and end. Returns (hit, loaded keys, tokens stored)."""
    hit, loaded = tier.lookup(req, gpu_hit)
    added, _ = tier.store(req, gpu_hit, hit, 1, [])
    return hit, loaded, sum(added.values())


def _runs(scenario: Scenario) -> dict[str, list[dict[str, Any]]]:
    return {r["name"]: r["requests"] for r in simulate(scenario, explain=False)["runs"]}


def test_capacity_is_whole_page_aligned_offload_blocks_of_the_total_size() -> None:
    # cpu/spec.py 111-123: kv_bytes_per_chunk = bytes per token x 16 tokens x blocks_per_chunk, rounded up to the
    # page (4,096 bytes); num_chunks = cpu_bytes_to_use // that; cpu_bytes_to_use = GiB x 2**30
    # (config/vllm.py 1173-1175), the total over workers.
    # 1,000 bytes per token: a 16-token block is 16,000 bytes, 16,384 aligned; 1 GiB holds
    # 1,073,741,824 // 16,384 = 65,536 blocks = 1,048,576 tokens (unaligned it would be 67,108 blocks).
    s = Scenario(cpu_backend="vllm-native", kv_bytes_per_token=1000, cpu_gb=1.0)
    assert s.cpu_capacity_tokens == 65_536 * 16
    # Two blocks per offload block: 32,000 bytes, 32,768 aligned: 32,768 offload blocks of 32 tokens.
    assert s.replace(blocks_per_chunk=2).cpu_capacity_tokens == 32_768 * 32
    # Given in tokens, whole offload blocks: 1,000 tokens hold 62 blocks of 16 (992 tokens).
    assert s.replace(cpu_gb=None, cpu_tokens=1000).cpu_capacity_tokens == 992
    # Too small for one offload block (16,384 bytes): an error naming the field and the need.
    with pytest.raises(ValidationError) as err:
        s.replace(cpu_gb=0.00001)
    assert err.value.errors()[0]["loc"] == ("cpu_gb",) and "16,384 bytes" in err.value.errors()[0]["msg"]


def test_lookup_starts_at_the_gpu_hit_and_needs_one_whole_offload_block_beyond_it() -> None:
    # Offload blocks of 4 GPU blocks (64 tokens). A 256-token prompt has 4 of them, keyed by the hash of
    # their last GPU block (scheduler.py 412-429): keys 4, 8, 12, 16.
    tier = NativeCpuTier("cpu", 10, 64, B, "lru")
    doc = _req(list(range(1, 17)), bpc=4)
    assert _serve(tier, doc) == (0, [], 256)  # empty tier: no hit; all four stored
    # GPU hit of 3 blocks (48 tokens): the lookup starts at the offload block holding token 48, block 0
    # (scheduler.py 943), and finds all four; the hit is what lies beyond the GPU: 256 - 48 = 208, loaded
    # from all four offload blocks (the first partly on the GPU already, update_state_after_alloc 1401-1430).
    assert tier.lookup(doc, 48) == (208, [4, 8, 12, 16])
    # GPU hit of 13 blocks (208 tokens): only 48 tokens remain, less than one offload block: no hit
    # (scheduler.py 921-923), though the tier holds them.
    assert tier.lookup(doc, 208) == (0, [])
    # A tier holding the first two offload blocks only (a fresh doc with keys 101..116).
    tier = NativeCpuTier("cpu", 10, 64, B, "lru")
    half = _req(list(range(101, 109)), bpc=4)  # 128 tokens: offload blocks 104, 108
    _serve(tier, half)
    longer = _req(list(range(101, 117)), bpc=4)  # the same start, 256 tokens
    # From GPU hit 16: blocks 104, 108 hit, 112 misses: the hit ends at 128, 112 tokens beyond the GPU.
    assert tier.lookup(longer, 16) == (112, [104, 108])
    # From GPU hit 80 (block 1 of the offload blocks): 108 hits, 112 misses: 128 - 80 = 48 < 64: no hit
    # (scheduler.py 993-996).
    assert tier.lookup(longer, 80) == (0, [])


def test_with_no_load_the_gpu_hit_blocks_are_offered_and_stored_after_a_load_they_are_not() -> None:
    # get_num_new_matched_tokens resets next_stored_chunk_idx to 0 (scheduler.py 1242-1245); only a load
    # moves it past the hit (1468-1472). So a request the GPU served entirely still offers every full
    # offload block, and the tier stores those it lacks (manager.py 272-281).
    tier = NativeCpuTier("cpu", 10, B, B, "lru")
    doc = _req([1, 2, 3, 4])
    tier.lookup(doc, 48)
    added, written = tier.store(doc, 48, 0, 1, [])
    assert (added, written) == ({0: 64}, 64)
    # A tier holding blocks 1 and 2: a GPU-less request loads them (hit 32) and offers only blocks 3 and 4.
    tier = NativeCpuTier("cpu", 10, B, B, "lru")
    _serve(tier, _req([1, 2], tokens=40))
    assert set(tier.chunks) == {1, 2}
    hit, loaded, stored = _serve(tier, doc)
    assert (hit, loaded, stored) == (32, [1, 2], 32) and set(tier.chunks) == {1, 2, 3, 4}


def test_lru_evicts_the_oldest_requests_tail_first() -> None:
    # lru.py: a request's blocks are ranked (request, -end token), then re-ranked tail first when it ends
    # (154-163), so its head is the most recent and its tail the least. Four blocks fill the tier; a
    # second request's two new blocks evict the first request's last two (4 then 3), not its first two.
    tier = NativeCpuTier("cpu", 4, B, B, "lru")
    _serve(tier, _req([1, 2, 3, 4]))
    evicted: list[Any] = []
    other = _req([11, 12], tokens=40, doc=1)
    tier.lookup(other, 0)
    tier.store(other, 0, 0, 1, evicted)
    assert [c[1] for c in evicted] == [3, 2]  # block positions 3 and 2: keys 4 and 3
    assert set(tier.chunks) == {1, 2, 11, 12}


def test_gpu_hit_blocks_before_a_load_are_not_refreshed() -> None:
    # The GPU holds block 1; the tier holds 1..4. The lookup starts at block 2 (scheduler.py 943) and loads
    # 2..4 (prepare_load records them, manager.py 239-240); storing starts after the hit, so block 1 is
    # neither loaded nor offered, and the request's end re-ranks 2..4 only. Block 1 is now the oldest,
    # and the next store evicts it. (LMCache refreshes every chunk of its hit, GPU-covered or not.)
    tier = NativeCpuTier("cpu", 4, B, B, "lru")
    doc = _req([1, 2, 3, 4])
    _serve(tier, doc)
    assert _serve(tier, doc, gpu_hit=16) == (48, [2, 3, 4], 0)
    evicted: list[Any] = []
    other = _req([11], tokens=20, doc=1)
    tier.lookup(other, 0)
    tier.store(other, 0, 0, 1, evicted)
    assert evicted == [(0, 0, B)]  # doc 0's block at position 0: key 1


def test_a_store_that_cannot_evict_enough_stores_nothing() -> None:
    # prepare_store evicts exactly what the new blocks need, never a block of the offer, all or nothing
    # (manager.py 321-336). A 5-block prompt offered to an empty 4-block tier needs 1 eviction with nothing
    # to evict: nothing is stored (an LMCache tier would keep 4 of them).
    tier = NativeCpuTier("cpu", 4, B, B, "lru")
    assert _serve(tier, _req([1, 2, 3, 4, 5])) == (0, [], 0)
    assert tier.used_tokens == 0
    # With 3 blocks of another document held, a 2-block prompt evicts exactly one of them.
    _serve(tier, _req([21, 22, 23], doc=1))
    assert _serve(tier, _req([1, 2], tokens=40)) == (0, [], 32)
    assert len(tier.chunks) == 4 and tier.used_tokens == 64


def test_arc_inserts_into_t1_moves_reuse_to_t2_at_the_end_and_adapts_on_ghost_misses() -> None:
    # arc.py: a stored block enters T1 (65-71); a block the request reused (loaded) moves to T2 when the
    # request ends (134-139), not at the lookup; eviction takes T1 while |T1| >= int(target) (178-182) and
    # remembers it in B1; a store miss found in B1 raises the target by max(1, |B2|/|B1|) (78-83).
    tier = NativeCpuTier("cpu", 2, B, B, "arc")
    arc = tier.native
    assert isinstance(arc, NativeArc)
    a = _req([1, 2], tokens=40)
    _serve(tier, a)
    assert list(arc.t1) == [2, 1] and not arc.t2  # tail first at the end: the head is the most recent
    hit, loaded = tier.lookup(a, 0)
    assert (hit, loaded) == (32, [1, 2]) and list(arc.t1) == [2, 1]  # the lookup alone moves nothing
    tier.store(a, 0, hit, 1, [])
    assert not arc.t1 and list(arc.t2) == [2, 1]
    # Two new blocks: target 0, |T1| = 0 >= 0 but T1 is empty, so T2's oldest two go to B2.
    b = _req([11, 12], tokens=40, doc=1)
    _serve(tier, b)
    assert list(arc.b2) == [2, 1] and list(arc.t1) == [12, 11]
    # Two more new blocks: T1's two (12 first) go to B1.
    c = _req([21, 22], tokens=40, doc=2)
    _serve(tier, c)
    assert list(arc.b1) == [12, 11]
    # b again: both keys are in B1; misses are reported tail first (arc.py 95-96): 12 then 11, each
    # raising the target by max(1, |B2| / |B1|) = max(1, 2/2) = 1: target 2. Room for both: T1 holds c's
    # two, |T1| = 2 >= 2 takes 22; then |T1| = 1 < 2 and T2 is empty, so T1 again: 21 (arc.py 189-194).
    # Both go to B1; b's blocks leave B1 and are stored into T1, not T2 as the paper's ARC would.
    _serve(tier, b)
    assert arc.target_t1 == 2 and set(arc.t1) == {11, 12} and list(arc.b1) == [22, 21]


def test_store_threshold_offloads_a_block_on_its_second_offer() -> None:
    # store_threshold 2 (spec.py 156-160; manager.py 267-291): the first offer only counts; a block is
    # stored when offered the second time. One 2-block prompt (doc 19 + question 13 = 32 tokens), asked
    # three times with a GPU that keeps it: pass 1 offers blocks 0-1 (count 1, nothing stored); pass 2
    # the GPU serves 16 tokens, nothing is loaded, so both are offered again from block 0 (count 2):
    # stored; pass 3 offers them held: nothing new.
    s = Scenario(
        docs=1, doc_tokens=19, cpu_backend="vllm-native", cpu_gb=None, cpu_tokens=1000, store_threshold=2,
        passes="forward,forward,forward", questions="same",
    )
    stored = [r["stored_tokens"] for r in _runs(s)["gpu+cpu"]]
    assert stored == [0, 32, 0]
    assert [r["stored_tokens"] for r in _runs(s.replace(store_threshold=0))["gpu+cpu"]] == [32, 0, 0]


@pytest.mark.parametrize(("prompt_only", "held"), [(True, 32), (False, 64)])
def test_offload_prompt_only_keeps_generated_blocks_out(prompt_only: bool, held: int) -> None:
    # A 32-token prompt generating 33 tokens: the KV of all but the last is 64 tokens, 4 full blocks
    # (scheduler.py 1832-1836). offload_prompt_only (base.py 725-731, scheduler.py 769-770) offers the
    # prompt's 2 blocks only; without it the 2 generated blocks are offered as decoding fills them.
    s = Scenario(
        docs=1, doc_tokens=19, output_tokens=33, cpu_backend="vllm-native", cpu_gb=None, cpu_tokens=1000,
        offload_prompt_only=prompt_only, passes="forward",
    )
    engine = Engine("gpu+cpu", tier_spec(s, "gpu+cpu"))
    engine.run_all(build_requests(s))
    assert engine.offload[0].used_tokens == held


def test_a_cpu_tier_no_larger_than_the_gpu_only_mirrors_it() -> None:
    # The trap: vLLM offers every computed block to the CPU, so a CPU tier no larger than the GPU keeps, like
    # the GPU, the most recently used blocks and no more of them: it misses where the GPU misses. Four seed documents (314 full
    # blocks each) read forward three times; the GPU has 374 usable blocks, so by the time a document
    # returns three others (942 blocks) have been through it: GPU-only hits nothing.
    # CPU tier of 375 blocks (6,000 tokens): each request stores 314 new blocks; before a document
    # returns, three stores of 314 evict all of its 314 (LRU, oldest first): not one CPU hit.
    # A CPU tier of all four documents (1,256 blocks) serves every re-read from pass 2 on.
    s = Scenario(docs=4, gpu_tokens=6000, cpu_backend="vllm-native", cpu_gb=None, cpu_tokens=6000, passes="forward,forward,forward")
    runs = _runs(s)
    assert sum(r["gpu_hit_tokens"] for r in runs["gpu"]) == 0
    assert sum(r["cpu_hit_tokens"] + r["gpu_hit_tokens"] for r in runs["gpu+cpu"]) == 0
    big = _runs(s.replace(cpu_tokens=4 * 314 * 16))["gpu+cpu"]
    # Passes 2 and 3: each prompt loads the document's 313 full blocks (5,008 tokens); the 314th holds the
    # end of the document and the pass's new question (questions fresh), so it misses.
    assert [r["cpu_hit_tokens"] for r in big[4:]] == [5008] * 8


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cpu_policy": "lfu"}, "cpu_policy"),
        ({"disk_gb": 1.0}, "disk_gb"),
        ({"save_unfull_chunk": True}, "save_unfull_chunk"),
        ({"cpu_backend": "lmcache", "store_threshold": 2}, "store_threshold"),
        ({"cpu_backend": "lmcache", "blocks_per_chunk": 2}, "blocks_per_chunk"),
    ],
)
def test_what_vllm_native_cannot_run_is_refused_at_its_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        Scenario(**{"cpu_backend": "vllm-native", **changes})
    assert err.value.errors()[0]["loc"] == (field,)


@pytest.mark.skipif(_libcachesim.available() is None, reason="libcachesim is not installed (pip install 'kvscope[bench]')")
def test_native_lru_equals_libcachesim_lru_on_plain_object_traces() -> None:
    # Each request is one object: a one-block prompt. A held block is loaded (a reuse) and re-ranked most
    # recent when the request ends; a missing one is offered, stored after evicting the lowest rank, and
    # ranked most recent at the end. With one block per request that is plain LRU, so the misses must be
    # libCacheSim's LRU's. (vLLM's ARC is not libCacheSim's ARC: it inserts every block into T1 and moves
    # its target once per request; no reference has it, so its rules are tested by hand above.)
    for i, stream in enumerate(traces()):
        for capacity, theirs in reference_misses("LRU", stream).items():
            tier = NativeCpuTier("cpu", capacity, B, B, "lru")
            ours = sum(_serve(tier, _req([key]))[0] == 0 for key in stream)
            assert ours == theirs, (i, capacity)

@st.composite
def native_scenarios(draw: st.DrawFn) -> Scenario:
    docs = draw(st.integers(1, 5))
    doc_tokens = draw(st.integers(1, 80))
    question = draw(st.integers(0, 10))
    gpu_blocks = -(-(doc_tokens + question + 4) // 4) + 1 + draw(st.integers(0, 30))
    orders = draw(st.lists(st.sampled_from(["forward", "reverse", "random@1", "random@2"]), min_size=1, max_size=4))
    return Scenario(
        docs=docs, doc_tokens=doc_tokens, question_tokens=question, block_size=4, blocks_per_chunk=draw(st.sampled_from([1, 2, 4])),
        gpu_tokens=gpu_blocks * 4, cpu_gb=None, cpu_tokens=draw(st.integers(16, 200)), cpu_backend="vllm-native",
        cpu_policy=draw(st.sampled_from(["lru", "arc"])), store_threshold=draw(st.sampled_from([0, 2, 3])),
        output_tokens=draw(st.integers(1, 5)), offload_prompt_only=draw(st.booleans()), passes=",".join(orders),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(native_scenarios())
def test_native_never_stores_a_block_it_holds_and_its_events_add_up(scenario: Scenario) -> None:
    engine = Engine("gpu+cpu", tier_spec(scenario, "gpu+cpu"))
    tier = engine.offload[0]
    assert isinstance(tier, NativeCpuTier)
    inserted = tier.native.insert

    def once(key: int, chunk: Any, position: int, request: Any) -> None:
        assert key not in tier.chunks, "stored a block the tier already holds"
        inserted(key, chunk, position, request)

    tier.native.insert = once  # type: ignore[method-assign]
    stored = evicted = 0
    for req in build_requests(scenario):
        _, events = engine.process(req)
        stored += sum(e.tokens for e in events if e.kind == "store" and e.tier == "cpu")
        evicted += sum(e.tokens for e in events if e.kind == "evict" and e.tier == "cpu")
        assert tier.used_tokens == stored - evicted == len(tier.chunks) * tier.chunk_size <= tier.capacity_tokens


def test_native_stores_cost_the_first_token_nothing() -> None:
    # The connector's worker defers every store to the next step (wait_for_save, offloading_connector.py
    # 134-138), after the request's forward pass: pass 1 of seed-lab stores each prompt's 314 blocks, yet its
    # TTFT is the GPU-only run's. LMCache copies its chunks out during the forward pass, which costs time.
    s = Scenario(cpu_backend="vllm-native", passes="forward")
    runs = _runs(s)
    assert [r["ttft_ms"] for r in runs["gpu+cpu"]] == [r["ttft_ms"] for r in runs["gpu"]]
    assert all(r["stored_tokens"] == 314 * 16 for r in runs["gpu+cpu"])
    lm = _runs(s.replace(cpu_backend="lmcache"))
    assert all(a["ttft_ms"] > b["ttft_ms"] for a, b in zip(lm["gpu+cpu"], lm["gpu"]))


def test_the_policy_comparison_runs_the_two_policies_vllm_native_offers() -> None:
    from sim.analysis.whatif import compare

    result = compare(Scenario(docs=2, cpu_backend="vllm-native", passes="forward"))
    assert [c["policy"] for c in result["cpu"]] == ["lru", "arc"]
