"""The seed experiment's facts, reproduced block-exactly (BRIEF.md).

Layout of seed-lab, used in the derivations below: a prompt is a 5,011-token
document plus a 13-token question = 5,024 tokens = 314 full 16-token blocks.
vLLM recomputes the last token, so at most floor(5023/16) = 313 blocks
(5,008 tokens) can hit. The GPU holds 21,520 / 16 = 1,345 blocks, one of them
the null block: 1,344 usable = 4 documents (1,256 blocks) + 88 blocks.
A prompt has floor(5024/256) = 19 full 256-token chunks = 4,864 tokens.
"""

from __future__ import annotations

from sim.analysis.sweep import sweep
from sim.blocks.kv import GIB
from sim.calibration.calibrate import read_table, seed_scenario
from sim.engine.events import CPU, GPU, Lookup
from sim.simulation.run import simulate, stream
from sim.workloads.presets import preset_fields
from sim.workloads.scenario import Scenario

PROMPT = 5024
MAX_GPU_HIT = 313 * 16
FULL_CHUNK_TOKENS = 19 * 256


def _run(result: dict, name: str) -> list[dict]:
    return next(r for r in result["runs"] if r["name"] == name)["requests"]


def _pass(requests: list[dict], number: int) -> list[dict]:
    return [r for r in requests if r["pass"] == number]


def test_second_same_order_pass_gets_zero_gpu_hits() -> None:
    # Cyclic scan with LRU: after pass 1 the cache holds docs 6-9 (and part of 5);
    # pass 2 starts with doc 0, which is gone, and each miss evicts the next doc needed.
    result = simulate(seed_scenario())
    pass2 = _pass(_run(result, "gpu"), 2)
    assert [r["doc"] for r in pass2] == list(range(10))
    assert all(r["gpu_hit_tokens"] == 0 for r in pass2)
    assert all(r["computed_tokens"] == PROMPT for r in pass2)


def test_reverse_pass_hits_the_documents_read_last() -> None:
    # After pass 2 the free queue holds docs 6..9 whole (314 blocks each) and the
    # 88 head blocks of doc 5 (tails are evicted first). Reverse order: docs 9, 8, 7, 6
    # each hit 313 blocks and allocate one block for the new question, evicting one
    # block of doc 5's tail end each; doc 5 then hits its first 88 - 4 = 84 blocks.
    gpu = _pass(_run(simulate(seed_scenario()), "gpu"), 3)
    hits = {r["doc"]: r["gpu_hit_tokens"] for r in gpu}
    assert [r["doc"] for r in gpu] == list(range(9, -1, -1))
    assert {d: hits[d] for d in (9, 8, 7, 6)} == dict.fromkeys((9, 8, 7, 6), MAX_GPU_HIT)
    assert hits[5] == 84 * 16
    assert all(hits[d] == 0 for d in range(5))


def test_document_granularity_reverse_pass_hits_exactly_9_8_7_6() -> None:
    # Whole documents: 21,520 // 5,011 = 4 fit, so the cache ends pass 2 with 6, 7, 8, 9.
    scenario = Scenario(**preset_fields("seed-lab-doc"))
    gpu = _pass(_run(simulate(scenario), "gpu"), 3)
    hit_docs = [r["doc"] for r in gpu if r["gpu_hit_tokens"] > 0]
    assert hit_docs == [9, 8, 7, 6]
    assert all(r["gpu_hit_tokens"] == 5011 for r in gpu if r["doc"] in hit_docs)
    assert all(r["gpu_hit_tokens"] == 0 for r in _pass(_run(simulate(scenario), "gpu"), 2))


def test_cpu_tier_serves_pass_two_in_whole_chunks() -> None:
    # 1.5 GiB / 28,672 B per token = 56,173 tokens >= 10 x 4,864: every full chunk
    # written in pass 1 is still there in pass 2.
    pass2 = _pass(_run(simulate(seed_scenario()), "gpu+cpu"), 2)
    for r in pass2:
        assert r["gpu_hit_tokens"] == 0
        assert r["cpu_hit_tokens"] == FULL_CHUNK_TOKENS
        assert r["computed_tokens"] == PROMPT - FULL_CHUNK_TOKENS
        assert r["source"] == "cpu"


def test_reverse_pass_with_cpu_tier_hits_gpu_first_and_skips_the_cpu_for_it() -> None:
    # The brief's rule 1, as the ``brief`` backend keeps it.
    events = [e for e in stream(seed_scenario().replace(cpu_backend="brief")) if e.run == "gpu+cpu"]
    ttft = {e.seq: e for e in events if e.kind == "ttft" and e.pass_ == 3}
    cpu_lookups = {e.seq: e for e in events if isinstance(e, Lookup) and e.tier == CPU}
    by_doc = {t.doc: t for t in ttft.values()}
    for doc in (9, 8, 7, 6):
        t = by_doc[doc]
        assert t.gpu_hit_tokens == MAX_GPU_HIT and t.cpu_hit_tokens == 0
        # Rule 1: 5,008 GPU-hit tokens cover all 19 full chunks: the CPU tier is not asked.
        assert t.seq not in cpu_lookups
    # Doc 5 hits 1,344 tokens on the GPU; the CPU is asked only about the rest and
    # loads up to the last full chunk: 4,864 - 1,344 = 3,520 tokens.
    t5 = by_doc[5]
    assert t5.gpu_hit_tokens == 1344 and t5.cpu_hit_tokens == FULL_CHUNK_TOKENS - 1344
    assert cpu_lookups[t5.seq].query_tokens == PROMPT - 1344
    for doc in range(5):
        assert by_doc[doc].cpu_hit_tokens == FULL_CHUNK_TOKENS
    assert all(e.tier == GPU for e in events if e.kind == "lookup" and e.seq in {by_doc[d].seq for d in (9, 8, 7, 6)})


def test_reverse_pass_under_lmcache_queries_the_cpu_for_what_the_gpu_missed() -> None:
    # vLLM's scheduler asks the connector about every new request
    # (vllm/v1/core/sched/scheduler.py 1130-1141) and counts as queried the tokens its
    # GPU did not hit (1211-1214): for docs 9..6 that is 5,024 - 5,008 = 16 tokens, of
    # which LMCache can serve none (its 19 chunks end at 4,864, inside the GPU hit).
    events = [e for e in stream(seed_scenario()) if e.run == "gpu+cpu"]
    ttft = {e.doc: e for e in events if e.kind == "ttft" and e.pass_ == 3}
    cpu_lookups = {e.seq: e for e in events if isinstance(e, Lookup) and e.tier == CPU}
    for doc in (9, 8, 7, 6):
        lookup = cpu_lookups[ttft[doc].seq]
        assert (lookup.query_tokens, lookup.hit_tokens) == (PROMPT - MAX_GPU_HIT, 0)
    assert ttft[5].cpu_hit_tokens == FULL_CHUNK_TOKENS - 1344


def test_cpu_tier_too_small_collapses_and_sweep_reports_the_threshold() -> None:
    # LMCache stores a document's chunks head first, so LRU evicts heads first: a tier
    # short of the 10 x 19 chunks loses the head of the next document needed, and a
    # prefix without its head is useless. Pass 2 gets no CPU hit at all.
    small = seed_scenario().model_copy(update={"cpu_gb": 0.9})
    assert sum(r["cpu_hit_tokens"] for r in _pass(_run(simulate(small), "gpu+cpu"), 2)) == 0
    found = sweep(seed_scenario()).to_dict()["cpu"]
    needed_tokens = 10 * FULL_CHUNK_TOKENS
    assert found["all_served_tokens"] == needed_tokens
    assert found["any_hit_tokens"] == needed_tokens
    assert abs(found["all_served_gib"] - needed_tokens * 28_672 / GIB) < 1e-3
    # And one chunk less than that serves nothing of pass 2.
    just_below = seed_scenario().model_copy(update={"cpu_gb": None, "cpu_tokens": needed_tokens - 256})
    assert sum(r["cpu_hit_tokens"] for r in _pass(_run(simulate(just_below), "gpu+cpu"), 2)) == 0


def test_default_costs_predict_the_seed_table_within_ten_percent() -> None:
    result = simulate(seed_scenario())
    predicted = {(run["name"], p["pass"]): p for run in result["runs"] for p in run["passes"]}
    for cell in read_table():
        p = predicted[(cell.config, cell.pass_)]
        assert abs(p["p50_ms"] / cell.p50_ms - 1) < 0.10, (cell, p["p50_ms"])
        assert abs(p["mean_ms"] / cell.mean_ms - 1) < 0.10, (cell, p["mean_ms"])
    speedup = next(c for c in result["comparison"] if c["pass"] == 2)["p50_speedup"]
    measured = 576.2 / 48.6  # the brief's pass-2 p50s: about 11.9x
    assert abs(speedup / measured - 1) < 0.10
