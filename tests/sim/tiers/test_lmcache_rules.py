"""The ``lmcache`` backend follows LMCache 0.5.6's own code where the brief simplified it; ``brief`` keeps the brief.

Each test reproduces one of the three rules on a scenario small enough to
derive by hand, and shows ``brief`` doing what the seed's rules say instead.
Lines cited are from LMCache 0.5.6 (``lmcache/v1/...``,
``lmcache/integration/vllm/vllm_v1_adapter.py``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.calibration.calibrate import seed_scenario
from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.simulation.run import simulate, stream, tier_spec
from sim.tiers.chunk_store import ChunkStore, StoredChunk
from sim.tiers.policies import CHUNK_POLICY_NAMES
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario

PROMPT = 5024  # seed-lab: a 5,011-token document + a 13-token question
FULL_CHUNKS = 19  # floor(5024 / 256)
MAX_GPU_HIT = 313 * 16  # floor(5023 / 16) blocks: vLLM recomputes the last token


def _requests(scenario: Scenario, run: str = "gpu+cpu") -> list[dict[str, Any]]:
    return next(r for r in simulate(scenario)["runs"] if r["name"] == run)["requests"]


def _cpu_evicted(record: dict[str, Any]) -> list[tuple[int, int, str]]:
    return [(e["doc"], e["tokens"], e["part"]) for e in record["evicted"] if e["tier"] == "cpu"]


def test_rule_1_lmcache_stores_chunks_the_gpu_had_when_it_lacks_them() -> None:
    # Two seed documents; the GPU (1,344 usable blocks) holds both 314-block prompts, the
    # CPU tier 5,000 tokens = 19 chunks (19 x 256 = 4,864 <= 5,000 < 20 x 256): one document.
    # Pass 1: doc 0 stores its 19 chunks; doc 1's 19 reservations each evict one of doc
    # 0's, head first (LRU), and doc 1 is stored: the CPU holds doc 1 alone.
    # Pass 2, doc 0: the GPU hits 5,008 tokens. LMCache finds doc 0's first chunk missing,
    # so its own hit is 0; the tracker's num_saved_tokens is that hit, not the GPU's
    # (vllm_v1_adapter.py 193, 1521-1524, 1657), and the save masks only those tokens
    # (1174-1191): all 19 chunks are copied out of the GPU and stored, evicting doc 1.
    # The brief writes through only chunks holding computed tokens: those start at the
    # 5,008-token hit, past the last full chunk, so it stores nothing.
    scenario = Scenario(docs=2, cpu_gb=None, cpu_tokens=5000, passes="forward,forward")
    lm = _requests(scenario)
    brief = _requests(scenario.replace(cpu_backend="brief"))
    for seq, doc, other in ((2, 0, 1), (3, 1, 0)):
        assert lm[seq]["gpu_hit_tokens"] == brief[seq]["gpu_hit_tokens"] == MAX_GPU_HIT
        assert lm[seq]["cpu_hit_tokens"] == brief[seq]["cpu_hit_tokens"] == 0
        assert lm[seq]["stored_tokens"] == FULL_CHUNKS * 256
        assert _cpu_evicted(lm[seq]) == [(other, FULL_CHUNKS * 256, "whole")]
        assert brief[seq]["stored_tokens"] == 0 and _cpu_evicted(brief[seq]) == []
    # The metric stays vLLM's: the prompt's other 16 tokens were computed either way.
    assert lm[2]["computed_tokens"] == brief[2]["computed_tokens"] == PROMPT - MAX_GPU_HIT


def test_rule_2_a_lookup_refreshes_every_hit_chunk_last_first_gpu_covered_ones_too() -> None:
    # Ten seed documents, GPU 30,000 tokens = 1,874 usable blocks (5 prompts + 304 blocks),
    # CPU 40,000 tokens = 156 chunks = 8 documents + 4 chunks; LRU.
    # Passes 1 and 2 (forward) are a cyclic scan: nothing hits, every document is stored
    # and evicts the front. After pass 2 the CPU's LRU order is, front first:
    # doc 1 chunks 15-18, docs 2, 3, ..., 9 (19 chunks each, stored head first).
    # Pass 3 (reverse): docs 9, 8, 7, 6, 5 hit 5,008 tokens on the GPU.
    #   brief: the CPU is not asked about them; its order does not change.
    #   lmcache: LMCache looks up the whole prompt, hits all 19 chunks and refreshes them in
    #   reverse (local_cpu_backend.py 137-142 after cache_engine.py 1271-1276): each of
    #   docs 9..5 moves to the back with its chunk 18 first and chunk 0 last.
    # Docs 4, 3, 2 then hit the CPU (refreshing their chunks under both rules), and doc 1
    # misses (its chunk 0 is gone): its 19 chunks evict the front, doc 1's own 4 chunks and
    # then 15 more:
    #   brief: docs 4's chunks 0-14, the oldest untouched (the brief refreshed only the one
    #   chunk doc 4 loaded beyond its GPU hit): its head;
    #   lmcache: doc 9's, refreshed first in pass 3, and tail first: chunks 18..4.
    # Doc 0 then evicts the next 19: brief doc 4's last untouched chunks and doc 5's head,
    # lmcache the rest of doc 9 and doc 8's tail. Pass 4 (reverse) starts with doc 9,
    # which the GPU lost long ago: brief still holds it whole, lmcache not at all.
    scenario = Scenario(cpu_gb=None, cpu_tokens=40_000, gpu_tokens=30_000, passes="forward,forward,reverse,reverse")
    lm = _requests(scenario)
    brief = _requests(scenario.replace(cpu_backend="brief"))
    assert [r["doc"] for r in lm[20:31]] == [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 9]
    assert _cpu_evicted(brief[28]) == [(1, 4 * 256, "tail"), (4, 15 * 256, "head")]
    assert _cpu_evicted(lm[28]) == [(1, 4 * 256, "tail"), (9, 15 * 256, "tail")]
    assert _cpu_evicted(brief[29]) == [(4, 3 * 256, "middle"), (5, 16 * 256, "head")]
    assert _cpu_evicted(lm[29]) == [(9, 4 * 256, "head"), (8, 15 * 256, "tail")]
    assert brief[30]["cpu_hit_tokens"] == FULL_CHUNKS * 256
    assert lm[30]["cpu_hit_tokens"] == 0


def test_rule_3_a_store_reserves_before_it_checks_what_is_held() -> None:
    # A tier of 3 one-token chunks holding A, B, C (LRU: A is evicted first); a store of C
    # (held) then D. LMCache allocates a memory object per chunk before putting any
    # (cache_engine.py 489-530): C's allocation finds the tier full and evicts A, D's
    # evicts B (local_cpu_backend.py 680-735). The put then skips C, which it holds
    # (162-164), and stores D. Both chunks were copied out of the GPU. The brief skips C
    # first and evicts only A to make room for D.
    def store(items: list[str]) -> ChunkStore:
        s = ChunkStore("cpu", 3, 1)
        s.put_many([(hash(k), (0, i, 1)) for i, k in enumerate(items)], [])
        return s

    new = [(hash("C"), (0, 2, 1)), (hash("D"), (0, 3, 1))]
    lm, evicted_lm = store(["A", "B", "C"]), []
    added, allocated = lm.store_reserving(new, evicted_lm)
    assert list(lm.chunks) == [hash("C"), hash("D")]
    assert evicted_lm == [(0, 0, 1), (0, 1, 1)] and added == {0: 1} and allocated == new
    brief, evicted_brief = store(["A", "B", "C"]), []
    assert brief.put_many(new, evicted_brief) == {0: 1}
    assert list(brief.chunks) == [hash("B"), hash("C"), hash("D")] and evicted_brief == [(0, 0, 1)]


def test_rule_3_reservations_made_before_any_put_change_what_mru_evicts() -> None:
    # Three documents of 512 tokens + 8-token questions: 520-token prompts with 2 full
    # chunks of document. The GPU holds one prompt (33 blocks + the null block), so no
    # document hits it in these passes; the CPU holds 5 chunks, MRU (evicts the back).
    # Pass 1: docs 0 and 1 store 4 chunks. Doc 2:
    #   brief: chunk 0 fills the tier; chunk 1 evicts the back, doc 2's own chunk 0;
    #   lmcache: chunk 0's reservation fits, chunk 1's evicts the back, doc 1's chunk 1,
    #   and only then both of doc 2's chunks are put.
    # Pass 2 reads doc 0 (a 512-token CPU hit either way) and doc 2: brief lacks its chunk 0
    # (a prefix without its head is useless), lmcache holds it whole.
    scenario = Scenario(
        docs=3, doc_tokens=512, question_tokens=8, gpu_tokens=16 * 34, cpu_gb=None, cpu_tokens=5 * 256,
        cpu_policy="mru", passes="0/1/2,0/2",
    )
    lm = _requests(scenario)
    brief = _requests(scenario.replace(cpu_backend="brief"))
    assert _cpu_evicted(brief[2]) == [(2, 256, "head")]
    assert _cpu_evicted(lm[2]) == [(1, 256, "tail")]
    assert lm[3]["cpu_hit_tokens"] == brief[3]["cpu_hit_tokens"] == 512
    assert brief[4]["cpu_hit_tokens"] == 0 and lm[4]["cpu_hit_tokens"] == 512


def test_the_issues_third_reproduction_keeps_whole_documents_and_hits_where_lmcache_would() -> None:
    # Four documents of 4,097 tokens + 3-token questions: 4,100-token prompts, 16 full chunks (4,096 tokens; the
    # 4-token rest is never stored, save_unfull_chunk off). The CPU's 12,300 tokens hold 48 chunks: three documents.
    # Orders: pass 1 (random*1@8) 0, 2, 3, 1; pass 2 forward; pass 3 (random*1@6) 3, 2, 1, 0; pass 4 3/2/1/0/1/3.
    # LMCache's rules, LRU, front first (a document's 16 reservations evict one whole document: 16 chunks):
    #   pass 1: 0, 2, 3 fill the tier; 1 evicts 0                        -> [2, 3, 1]
    #   seq 4 (doc 0) misses, evicts 2                                    -> [3, 1, 0]
    #   seq 5 (doc 1) hits its 16 chunks (3,040 on the GPU, 1,056 loaded); the lookup refreshes all 16 (rule 2),
    #     and nothing is stored (num_saved_tokens 4,096, 4,100 < the next chunk boundary: vllm_v1_adapter.py 326-340)
    #                                                                     -> [3, 0, 1]
    #   seq 6 (doc 2) evicts 3, seq 7 (doc 3) evicts 0                   -> [1, 2, 3]
    #   seq 8 (doc 3, a whole GPU hit) and seq 9 (doc 2) refresh theirs   -> [1, 3, 2]
    #   seq 10 (doc 1): a CPU hit of all 4,096 tokens                     -> [3, 2, 1]
    #   then every request misses and evicts the front document, but seq 16 (doc 1, 1,056 from CPU again).
    # The brief refreshed only the 5 chunks doc 1 loaded at seq 5, so seq 7 evicted doc 1's first 11 chunks and
    # 5 of doc 0's, and seq 10 found doc 1 without its head: no hit.
    scenario = Scenario(
        docs=4, doc_tokens=4097, question_tokens=3, gpu_tokens=7179, cpu_gb=None, cpu_tokens=12_300, seed=2,
        passes="random*1@8,forward,random*1@6,3/2/1/0/1/3",
    )
    lm = _requests(scenario)
    brief = _requests(scenario.replace(cpu_backend="brief"))
    assert [r["doc"] for r in lm] == [0, 2, 3, 1, 0, 1, 2, 3, 3, 2, 1, 0, 3, 2, 1, 0, 1, 3]
    assert [r["gpu_hit_tokens"] for r in lm] == [r["gpu_hit_tokens"] for r in brief]
    whole = 16 * 256
    assert [[(doc, tokens) for doc, tokens, _ in _cpu_evicted(r)] for r in lm] == [
        [], [], [], [(0, whole)], [(2, whole)], [], [(3, whole)], [(0, whole)], [], [], [], [(3, whole)],
        [(2, whole)], [(1, whole)], [(0, whole)], [(3, whole)], [], [(2, whole)],
    ]
    assert [r["cpu_hit_tokens"] for r in lm] == [0] * 5 + [4096 - 3040] + [0] * 3 + [4096 - 3040, whole] + [0] * 5 + [1056, 0]
    assert _cpu_evicted(brief[7]) == [(1, 11 * 256, "head"), (0, 5 * 256, "head")]
    assert brief[10]["cpu_hit_tokens"] == 0


def test_the_seed_lab_table_does_not_move_under_lmcache() -> None:
    # In seed-lab the CPU tier (56,173 tokens) holds all ten documents' 19 chunks
    # (48,640 tokens): nothing is evicted, so neither the reservation nor the refresh
    # order matters; and LMCache's own hit always covers every full chunk after pass 1,
    # so it stores nothing the brief would not. Every record is the same.
    lm = simulate(seed_scenario())
    brief = simulate(seed_scenario().replace(cpu_backend="brief"))
    assert seed_scenario().cpu_backend == "lmcache"
    assert lm["runs"] == brief["runs"]
    assert lm["comparison"] == brief["comparison"]
    assert not any(e["tier"] == "cpu" for run in lm["runs"] for r in run["requests"] for e in r["evicted"])


class _NoOverwrite(OrderedDict[int, StoredChunk]):
    """A tier's chunk map that fails if a chunk is put while the tier holds it."""

    def __setitem__(self, key: int, value: StoredChunk) -> None:
        assert key not in self, "stored a chunk the tier already holds"
        super().__setitem__(key, value)


@st.composite
def pressured(draw: st.DrawFn) -> Scenario:
    docs = draw(st.integers(1, 5))
    doc_tokens = draw(st.integers(1, 80))
    question = draw(st.integers(0, 10))
    prompt = doc_tokens + question
    gpu_blocks = -(-prompt // 4) + 1 + draw(st.integers(0, 30))
    orders = draw(st.lists(st.sampled_from(["forward", "reverse", "random@1", "random@2"]), min_size=1, max_size=4))
    chunk, unfull = draw(st.sampled_from([4, 8, 16])), draw(st.booleans())
    return Scenario(
        docs=docs, doc_tokens=doc_tokens, question_tokens=question, block_size=4,
        chunk_size=chunk, gpu_tokens=gpu_blocks * 4, cpu_gb=None,
        cpu_tokens=draw(st.integers(1 if unfull else chunk, 200)), save_unfull_chunk=unfull,  # the least a tier stores
        cpu_policy=draw(st.sampled_from(CHUNK_POLICY_NAMES)), passes=",".join(orders),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pressured())
def test_lmcache_never_stores_a_chunk_it_already_holds(scenario: Scenario) -> None:
    engine = Engine("gpu+cpu", tier_spec(scenario, "gpu+cpu"), default_costs())
    assert engine.cpu is not None
    engine.cpu.eviction.chunks = _NoOverwrite()
    stored = evicted = 0
    for req in build_requests(scenario):
        _, events = engine.process(req)
        stored += sum(e.tokens for e in events if e.kind == "store" and e.tier == "cpu")
        evicted += sum(e.tokens for e in events if e.kind == "evict" and e.tier == "cpu")
        # What the events say was stored, less what they say was evicted, is what it holds.
        assert engine.cpu.used_tokens == stored - evicted <= engine.cpu.capacity_tokens


def test_a_cpu_tier_smaller_than_a_prompt_cuts_the_store_short_for_the_disk_too() -> None:
    # The CPU holds 14 chunks, a prompt has 19 (seed-lab). LMCache allocates every chunk of a
    # store from the CPU's memory (the disk gets copies of those objects,
    # storage_manager.py 411-431): the 15th allocation finds nothing left to evict and the
    # store keeps the 14 it has (cache_engine.py 518-525). So the disk, big enough for all,
    # receives 14 chunks of each document. The brief writes all 19 to the disk.
    scenario = Scenario(docs=2, cpu_gb=None, cpu_tokens=14 * 256, disk_tokens=100_000, passes="forward")
    lm = _requests(scenario, "gpu+cpu+disk")
    brief = _requests(scenario.replace(cpu_backend="brief"), "gpu+cpu+disk")
    assert [r["stored_tokens"] for r in lm] == [14 * 256] * 2
    assert [r["stored_tokens"] for r in brief] == [FULL_CHUNKS * 256] * 2
    on_disk = {e.run: e.used_tokens for e in stream(scenario) if e.kind == "occupancy" and e.tier == "disk"}
    assert on_disk == {"gpu+cpu+disk": 2 * 14 * 256}
