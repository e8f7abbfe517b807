"""Eviction policies as what-ifs: exact free-queue orders, golden hit counts, and Belady as an upper bound."""

from __future__ import annotations

import json
from typing import Literal, get_args, get_origin

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cli import main
from sim.analysis.whatif import compare
from sim.blocks.policies import GPU_POLICY_NAMES
from sim.blocks.pool import GpuBlockPool
from sim.workloads.scenario import PassSpec, Scenario

SEED_DOC_TOKENS = 5011


def _serve(pool: GpuBlockPool, keys: list[int], prompt_blocks: int, doc: int) -> int:
    """One request through the pool, as the engine does it: returns its hit blocks."""
    hits = pool.find_prefix(keys, len(keys))
    pool.touch(hits)
    blocks = hits + pool.allocate(prompt_blocks - len(hits), {})
    pool.cache_blocks(blocks, keys, len(hits), doc, 0)
    pool.free(blocks)
    return len(hits)


A, B, C = [1, 2], [11, 12], [21, 22]  # three 2-block documents


def test_fifo_ignores_hits_where_lru_refreshes() -> None:
    # Blocks 1..8 usable. A takes 1, 2; B takes 3, 4; then A hits both of its blocks.
    orders = {}
    for policy in ("lru", "fifo"):
        pool = GpuBlockPool(num_blocks=9, block_size=16, policy=policy)
        _serve(pool, A, 2, 0)
        _serve(pool, B, 2, 1)
        assert _serve(pool, A, 2, 0) == 2
        orders[policy] = list(pool.free_queue)
    # Never-used blocks 5..8 go first under both. LRU then evicts B (least recently
    # used), tail first: 4, 3, then A: 2, 1. FIFO evicts A first because A was
    # computed first; its hit changed nothing.
    assert orders["lru"] == [5, 6, 7, 8, 4, 3, 2, 1]
    assert orders["fifo"] == [5, 6, 7, 8, 2, 1, 4, 3]


def test_mru_evicts_the_last_request_first_and_its_tail_first() -> None:
    pool = GpuBlockPool(num_blocks=9, block_size=16, policy="mru")
    for doc, keys in enumerate((A, B, C)):
        _serve(pool, keys, 2, doc)
    # Unused blocks 7, 8 first; then C (blocks 5, 6: tail 6 first), then B, then A.
    assert list(pool.free_queue) == [7, 8, 6, 5, 4, 3, 2, 1]
    # A new 3-block document takes 7, 8 and C's tail: C's head still hits.
    _serve(pool, [31, 32, 33], 3, 3)
    assert _serve(pool, C, 2, 2) == 1


@pytest.mark.parametrize("policy", ["fifo", "mru", "belady"])
def test_blocks_that_hold_nothing_are_reused_before_any_eviction(policy: str) -> None:
    from sim.engine.loop import Engine
    from sim.simulation.run import tier_spec
    from sim.workloads.requests import build_requests

    # 2-block documents plus a 5-token question: a request needs 3 blocks at once and
    # leaves 2 cached and 1 partial (empty) block. 9 usable blocks hold the 4 documents'
    # 8 cached blocks plus that one empty block, so reading 4 documents and then the same
    # 4 again hits every document, unless a policy evicts KV while an empty block is free.
    scenario = Scenario(
        docs=4, doc_tokens=32, question_tokens=5, block_size=16, chunk_size=16, gpu_tokens=10 * 16,
        cpu_gb=None, passes="forward,forward", gpu_policy=policy,
    )
    engine = Engine("gpu", tier_spec(scenario, "gpu"))
    records = engine.run_all(build_requests(scenario))
    assert [r.gpu_hit_tokens for r in records if r.pass_ == 2] == [32, 32, 32, 32]


def _gpu_hits(scenario: Scenario) -> dict[str, int]:
    return {e["policy"]: e["totals"]["gpu_hit_tokens"] for e in compare(scenario)["gpu"]}


def test_golden_doc_sequences_where_mru_and_lru_each_lose() -> None:
    # Whole documents of 100 tokens (+ a 5-token question that is never cached); the
    # GPU holds 2 documents. When doc 2 arrives, docs 0 and 1 are cached.
    scenario = Scenario(docs=3, doc_tokens=100, question_tokens=5, gpu_tokens=200, cpu_gb=None, granularity="doc")
    # 0,1,2,0: LRU and FIFO evict doc 0 (oldest) and miss it; MRU evicts doc 1 (the
    # most recent) and Belady evicts doc 1 (never asked for again): one 100-token hit.
    assert _gpu_hits(scenario.replace(passes="0/1/2/0")) == {"lru": 0, "fifo": 0, "mru": 100, "belady": 100}
    # 0,1,2,1: now doc 0 is the one never asked for again. MRU still evicts doc 1 and
    # misses it; LRU, FIFO and Belady evict doc 0 and hit doc 1.
    assert _gpu_hits(scenario.replace(passes="0/1/2/1")) == {"lru": 100, "fifo": 100, "mru": 0, "belady": 100}


def test_cyclic_reread_lru_zero_where_mru_and_belady_keep_all_but_one_document() -> None:
    # Ten whole documents cycled twice through a GPU holding nine. Pass 1 fills 0..8;
    # docs 9 then must evict one. LRU/FIFO evict the oldest, so each pass-2 request
    # finds its document just evicted: zero hits. MRU evicts the newest (doc 8), Belady
    # the one asked for latest (doc 8 again: 0..7 come back first), leaving 0..7 and 9;
    # in pass 2 both hit 0..7, then doc 8 evicts a document not needed again, and 9
    # still hits: nine documents of 5,011 tokens.
    scenario = Scenario(
        docs=10, doc_tokens=SEED_DOC_TOKENS, question_tokens=13, gpu_tokens=9 * SEED_DOC_TOKENS, cpu_gb=None,
        granularity="doc", passes="forward,forward",
    )
    result = compare(scenario)["gpu"]
    pass2 = {e["policy"]: e["passes"][1]["gpu_hit_tokens"] for e in result}
    assert pass2 == {"lru": 0, "fifo": 0, "mru": 9 * SEED_DOC_TOKENS, "belady": 9 * SEED_DOC_TOKENS}


def test_cyclic_seed_lab_blocks_lru_zero_belady_and_mru_near_capacity() -> None:
    # The seed: 10 x 5,024-token prompts through 1,344 usable 16-token blocks, forward twice.
    scenario = Scenario(passes="forward,forward", cpu_gb=None)
    result = {e["policy"]: e["passes"][1]["gpu_hit_tokens"] for e in compare(scenario)["gpu"]}
    usable = (21_520 // 16 - 1) * 16
    assert result["lru"] == 0 and result["fifo"] == 0
    # Pass 2 can only hit what pass 1 left, so at most the usable capacity; keeping whole
    # documents' prefixes (MRU, Belady) gets within a few blocks of it.
    assert 0.95 * usable <= result["mru"] <= result["belady"] <= usable


def test_cpu_policies_on_a_cyclic_reread_with_a_cpu_tier_one_document_short() -> None:
    # Each 5,024-token prompt stores 19 full 256-token chunks; the CPU holds 9 documents'
    # worth. LRU and FIFO: doc 9 evicts doc 0, and in pass 2 each document evicts the
    # next one needed: no CPU hit, under either backend.
    scenario = Scenario(passes="forward,forward", cpu_gb=None, cpu_tokens=9 * 19 * 256)
    # brief: MRU's doc 9 chunks evict doc 8's last chunk and then each other, leaving
    # docs 0..7 whole and doc 8 with 18 chunks; pass 2 loads 8 x 19 + 18 chunks before
    # doc 8's store evicts its own 18th chunk and doc 9 misses.
    mine = ("lru", "fifo", "mru")  # the others have tests of their own (tests/sim/tiers/test_chunk_policies.py)
    brief = {
        e["policy"]: e["passes"][1]["cpu_hit_tokens"]
        for e in compare(scenario.replace(cpu_backend="brief"))["cpu"] if e["policy"] in mine
    }
    assert brief == {"lru": 0, "fifo": 0, "mru": (8 * 19 + 18) * 256}
    # lmcache: doc 9 reserves its 19 chunks before putting any (cache_engine.py 489-530),
    # and each reservation evicts the back of the MRU order: all 19 of doc 8's. Pass 1
    # leaves docs 0..7 and 9 whole. In pass 2 docs 0..7 hit all 19 chunks (the lookup
    # moves them to the back, chunk 0 last); doc 8 misses and its 19 reservations evict
    # doc 7 (the back), and doc 9 hits its 19: 9 x 19 chunks served.
    lmcache = {e["policy"]: e["passes"][1]["cpu_hit_tokens"] for e in compare(scenario)["cpu"] if e["policy"] in mine}
    assert lmcache == {"lru": 0, "fifo": 0, "mru": 9 * 19 * 256}


@st.composite
def workloads(draw: st.DrawFn) -> Scenario:
    block = draw(st.sampled_from([4, 16]))
    docs = draw(st.integers(1, 6))
    doc_tokens = draw(st.integers(1, 90))
    question = draw(st.integers(0, 12))
    shared = draw(st.sampled_from([0, 0, 2 * block, 5]))
    prompt = shared + doc_tokens + question
    least = (-(-prompt // block) + 1) * block
    passes = draw(
        st.lists(
            st.one_of(
                st.sampled_from(["forward", "reverse"]).map(lambda o: PassSpec(order=o)),
                st.integers(0, 50).map(lambda s: PassSpec(order="random", seed=s)),
                st.integers(0, 50).map(lambda s: PassSpec(order="zipf", seed=s)),
                st.lists(st.integers(0, docs - 1), min_size=1, max_size=8).map(
                    lambda d: PassSpec(order="list", docs=tuple(d))
                ),
            ),
            min_size=1,
            max_size=4,
        )
    )
    return Scenario(
        docs=docs, doc_tokens=doc_tokens, question_tokens=question, shared_prefix_tokens=shared, block_size=block,
        chunk_size=block, gpu_tokens=draw(st.integers(least, least * (docs + 1))), cpu_gb=None, passes=passes,
        granularity=draw(st.sampled_from(["block", "block", "doc"])), free_order=draw(st.sampled_from(["vllm", "vllm-legacy"])),
    )


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_belady_is_never_beaten(scenario: Scenario) -> None:
    hits = _gpu_hits(scenario)
    for policy in GPU_POLICY_NAMES:
        assert hits["belady"] >= hits[policy], (policy, hits)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(GPU_POLICY_NAMES))
def test_every_policy_keeps_the_pool_consistent(scenario: Scenario, policy: str) -> None:
    from sim.engine.loop import Engine
    from sim.simulation.run import tier_spec
    from sim.workloads.requests import build_requests

    engine = Engine("gpu", tier_spec(scenario.replace(gpu_policy=policy), "gpu"))
    requests = build_requests(scenario)
    engine.plan(requests)
    pool = engine.gpu
    for req in requests:
        record, _ = engine.process(req, emit=False)
        # Hits are whole blocks of a prefix, never past the last token's block.
        assert record.gpu_hit_tokens % engine.units.block == 0
        assert record.gpu_hit_tokens <= req.max_hit_blocks * engine.units.block
        # Between requests every usable block is free, once, and cached blocks are counted once.
        free = list(pool.free_queue)
        assert len(free) == len(set(free)) == pool.capacity_blocks == len(pool.free_queue)
        assert sum(pool.doc_blocks.values()) == pool.cached_blocks


def test_policies_command_marks_the_scenarios_policies() -> None:
    result = CliRunner().invoke(main, ["policies", "--passes", "forward,forward", "--cpu-policy", "mru", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [e["policy"] for e in data["gpu"]] == ["lru", "fifo", "mru", "belady"]
    assert [e["policy"] for e in data["cpu"] if e["current"]] == ["mru"]
    assert [e["policy"] for e in data["gpu"] if e["current"]] == ["lru"]


def test_unknown_policy_is_a_usage_error_naming_the_flag() -> None:
    result = CliRunner().invoke(main, ["simulate", "--gpu-policy", "lfu"])
    assert result.exit_code == 2
    assert "--gpu-policy" in result.output


def test_simulate_reports_the_policy_of_each_tier() -> None:
    from sim.simulation.run import simulate

    result = simulate(Scenario(gpu_policy="belady", cpu_policy="fifo"))
    tiers = {run["name"]: {t["name"]: t["policy"] for t in run["tiers"]} for run in result["runs"]}
    assert tiers == {"gpu": {"gpu": "belady"}, "gpu+cpu": {"gpu": "belady", "cpu": "fifo"}}


def test_every_list_of_policy_or_backend_names_is_written_once() -> None:
    # One definition each: the GPU policies (sim.blocks.policies' registry), the chunk policies (sim.tiers.policies')
    # and the CPU backends (sim.tiers.chunk_store's CpuBackend). Any other file writing two of a list's names in a
    # row, quoted, repeats the list, and would miss a name added to the registry.
    import re
    from pathlib import Path
    from typing import get_args

    from app.cli.scenario_flags import FLAGS
    from sim.tiers.chunk_store import CPU_BACKENDS

    from live_servers import ROOT as root
    runs = re.compile(r"""["']lru["']\s*,\s*["'](fifo|lfu|mru|arc)["']|["']lmcache["']\s*,\s*["']vllm-native["']""")
    found = sorted(
        str(path.relative_to(root))
        for folder in ("sim", "app", "templates", "static/js")
        for path in (root / folder).rglob("*")
        if path.suffix in (".py", ".html", ".js") and runs.search(path.read_text())
    )
    assert found == ["sim/tiers/chunk_store.py"]
    assert get_args(Scenario.model_fields["gpu_policy"].annotation) == GPU_POLICY_NAMES
    flag = next(kind for name, _, kind, _ in FLAGS if name == "--gpu-policy")
    assert tuple(flag.choices) == GPU_POLICY_NAMES
    assert get_args(Scenario.model_fields["cpu_backend"].annotation) == CPU_BACKENDS


def test_every_cli_choice_is_the_scenarios_own() -> None:
    # Each scenario flag offering a fixed list (--gpu-policy, --cpu-policy, --granularity, --free-order, ...) offers
    # exactly the values the scenario's field accepts: the CLI writes none of its own.
    from app.cli.scenario_flags import FLAGS

    choices = {field: tuple(kind.choices) for _, field, kind, *_ in FLAGS if isinstance(kind, click.Choice)}
    assert {"gpu_policy", "cpu_policy", "granularity", "free_order"} <= set(choices)
    for field, offered in choices.items():
        accepted = get_args(Scenario.model_fields[field].annotation)
        accepted = tuple(a for a in accepted if a is not type(None))  # an optional field: its values, not None
        assert offered == accepted, field
    # The page's scenario form too: each select of a field with a fixed list offers that list.
    from app.web.scenario_form import FIELDS as FORM

    selects = {f.name: f.options for f in FORM if f.kind == "select" and get_origin(Scenario.model_fields[f.name].annotation) is Literal}
    assert {"gpu_policy", "cpu_policy", "granularity", "free_order"} <= set(selects)
    for field, options in selects.items():
        assert options == get_args(Scenario.model_fields[field].annotation), field
