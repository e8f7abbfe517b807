"""vLLM's native stores, step by step: not ready until copied, copied a step later, refused, dropped, finishes late.

Block size 16, one GPU block per offload block (vLLM's default), every step 1 ms (a step that computes nothing
0 ms). Each document of 64 tokens is read with a fresh 16-token question: 80-token prompts, 5 blocks (d.0 to d.3
and a question block q), each request offering its 5 blocks.
"""

from __future__ import annotations

import json
from pathlib import Path

from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.explain.causes import DESCRIPTIONS, FIRST_SEEN, LAST_TOKEN, NOT_STORED
from sim.explain.observer import attach
from sim.sched.arrivals import ClosedLoop
from sim.sched.step_costs import StepCosts
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.tiers.native.arc import NativeArc
from sim.workloads.requests import build_requests
from sim.workloads.scenario import PassSpec, Scenario
from tests.sim.sched.test_sched_cli import run as simulate

BLOCK = 16


def scenario(docs: int, passes: int, gpu_blocks: int, cpu_blocks: int, **more: object) -> Scenario:
    return Scenario(
        docs=docs, doc_tokens=64, question_tokens=16, gpu_tokens=gpu_blocks * BLOCK, cpu_tokens=cpu_blocks * BLOCK,
        cpu_backend="vllm-native", passes=[PassSpec()] * passes, **more,
    )


def stepped(s: Scenario) -> SteppedEngine:
    return SteppedEngine(Engine("gpu+cpu", tier_spec(s, "gpu+cpu"), default_costs()), None, StepCosts.clock())


def test_a_store_refused_while_the_blocks_it_would_evict_are_written_is_dropped_and_its_document_misses() -> None:
    # Three documents read twice in order, one at a time; the CPU holds 8 blocks (fewer than two prompts), the GPU 6
    # usable, so each read evicts the GPU copy of the one two before it: every CPU hit is a load.
    s = scenario(docs=3, passes=2, gpu_blocks=7, cpu_blocks=8)
    run = stepped(s).run(build_requests(s), ClosedLoop(1))
    steps = {o.step: o for o in run.steps}
    # Step 1: r0 (d0) computes 80 tokens; its 5 blocks are offered in that schedule and inserted not ready: the
    # worker copies them during step 2 (offloading_connector.py 134-138) and step 2's output completes them.
    assert (steps[1].scheduled, steps[1].stored) == ({0: 80}, {"cpu": 80})
    # Step 2: r1 (d1) offers its 5; 3 blocks are free, so 2 must go, but the 5 held are r0's, still being written:
    # none evictable (cpu/manager.py 325-327): refused. r0's finish reaches the connector in this schedule.
    assert (steps[2].scheduled, steps[2].stored, steps[2].refused) == ({1: 80}, {}, {"cpu": 1})
    # Step 3: r2 (d2) offers first: r0's blocks are ready now, 2 go (LRU: r0's finish ranked them tail first, so
    # q and d0.3), r2's 5 go in not ready. Then r1's finished pass offers its 5 again: 8 held, 5 not ready, 3
    # evictable for the 5 it needs: refused again, its last offer: dropped (80 tokens).
    assert (steps[3].scheduled, steps[3].stored, steps[3].refused, steps[3].dropped) == (
        {2: 80}, {"cpu": 80}, {"cpu": 1}, {"cpu": 80},
    )
    # Step 4: r3 (d0) misses the GPU; the CPU holds d0.0-d0.2, not d0.3: 48 tokens, loaded asynchronously. That
    # access ranks them with r3's rank, drawn before r2's finish is handed over later in this schedule, so they
    # are now older than r2's blocks. Step 5: r3 computes 32 and offers d0.3 and its q: 2 must go, the oldest
    # are the 3 it loaded (head last): d0.2 and d0.1 go.
    assert (steps[4].scheduled, steps[4].loaded, steps[5].scheduled) == ({}, {"cpu": 48}, {3: 32})
    # Step 6: r4 (d1) finds nothing of d1 (its store was dropped) and computes 80; its store evicts 5 of the 6
    # ready blocks (r3's two are still being written), oldest first: d0.0 (r3's rank: r3's finish comes after
    # this offer, in the same schedule), then r2's, tail first: q, d2.3, d2.2, d2.1. Step 7: r5 (d2) finds
    # d2.0 alone: 16 tokens loaded; step 8 computes 64.
    assert (steps[6].scheduled, steps[7].loaded, steps[8].scheduled) == ({4: 80}, {"cpu": 16}, {5: 64})
    loads = [r.cpu_hit_tokens for r in run.records]
    assert loads == [0, 0, 0, 48, 0, 16]
    assert [(f.store_refused, f.store_dropped_tokens) for f in run.flights] == [(0, 0), (2, 80), (0, 0), (0, 0), (0, 0), (0, 0)]
    # One request at a time with every transfer done and every finish applied before the next lookup (the
    # sequential engine), r1's store evicts r0's q and d0.3 and r2's the rest of d0: LRU's cyclic collapse, no
    # CPU hit in pass 2.
    sequential = Engine("gpu+cpu", tier_spec(s, "gpu+cpu"), default_costs()).run_all(build_requests(s))
    assert [r.cpu_hit_tokens for r in sequential] == [0] * 6


def test_an_arc_block_read_while_it_is_still_written_is_no_reuse() -> None:
    # One document read four times in a row, the GPU large enough to keep it: every read after the first hits its
    # 4 blocks on the GPU and offers them to the CPU again (no load, so storing starts at block 0).
    s = scenario(docs=1, passes=4, gpu_blocks=64, cpu_blocks=64, cpu_policy="arc")
    engine = stepped(s)
    tier = engine.engine.native_cpu
    assert tier is not None and isinstance(tier.native, NativeArc)
    arc = tier.native
    doc = build_requests(s)[0].block_keys[:4]
    t2_after = {}
    for out in engine.steps(build_requests(s), ClosedLoop(1)):
        t2_after[out.step] = set(arc.t2)
    # Step 1 inserts r0's blocks, not ready until step 2 ends. Step 2: r1 offers them while they are being
    # written: not a reuse (cpu/manager.py 274-280), so r1's finish (handed over in step 3) promotes nothing.
    # Step 3: r2 offers them ready: a reuse; its finish is handed over in step 4's schedule, which moves them
    # from T1 to T2 (arc.py 116-139).
    assert t2_after == {1: set(), 2: set(), 3: set(), 4: set(doc)}
    # The sequential engine completes r0's store before r1 comes: r1's offer is a reuse, promoted at its end.
    sequential = Engine("gpu+cpu", tier_spec(s, "gpu+cpu"), default_costs())
    seq_arc = sequential.native_cpu.native  # type: ignore[union-attr]
    assert isinstance(seq_arc, NativeArc)
    requests = build_requests(s)
    sequential.process(requests[0], emit=False)
    sequential.process(requests[1], emit=False)
    assert set(seq_arc.t2) == set(doc)


def test_store_threshold_two_stores_in_the_second_pass_and_hits_in_the_third() -> None:
    # Two documents read three times in order, one at a time; the GPU (6 usable blocks) keeps only the head of
    # the document read two requests before: block .0 survives the other document's 5 (the spare and the 4
    # blocks after it, tail first). With store_threshold 2 a block is stored at its second offer
    # (cpu/manager.py 282-291); an offer that stores nothing moves the request on (scheduler.py 1998-2000), so
    # each read offers its blocks once.
    s = scenario(docs=2, passes=3, gpu_blocks=7, cpu_blocks=64, store_threshold=2)
    run = stepped(s).run(build_requests(s), ClosedLoop(1))
    rows = [(r.pass_, r.gpu_hit_tokens, r.cpu_hit_tokens, r.stored_tokens) for r in run.records]
    assert rows == [
        (1, 0, 0, 0), (1, 0, 0, 0),  # first offers: counted once, nothing stored
        (2, 16, 0, 64), (2, 16, 0, 64),  # d.0 from the GPU; d.0-d.3 offered a second time: stored (q is new)
        (3, 16, 48, 0), (3, 16, 48, 0),  # the first CPU hit: d.1-d.3 beyond the GPU's d.0
    ]


def test_refused_and_dropped_stores_are_counted_in_the_json_and_the_ledger(tmp_path: Path) -> None:
    # The first scenario above from the command line: r1's store refused twice (steps 2 and 3), 80 tokens dropped.
    ledger = tmp_path / "steps.jsonl"
    flags = ["--docs", "3", "--doc-tokens", "64", "--question-tokens", "16", "--gpu-tokens", "112", "--cpu-tokens",
             "128", "--cpu-backend", "vllm-native", "--passes", "forward,forward", "--concurrency", "1"]
    code, out = simulate(*flags, "--json", "--steps", str(ledger))
    assert code == 0
    cpu = json.loads(out)["runs"][1]
    assert [(r["store_refused"], r["store_dropped_tokens"]) for r in cpu["requests"]][:2] == [(0, 0), (2, 80)]
    assert (cpu["serving"]["store_refused"], cpu["serving"]["store_dropped_tokens"]) == (2, 80)
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    marked = [(line["step"], line.get("refused"), line.get("dropped")) for line in lines if line["run"] == "gpu+cpu" and "refused" in line]
    assert marked == [(2, {"cpu": 1}, None), (3, {"cpu": 1}, {"cpu": 80})]
    # The table's serving line says it too, and each request's causes carry the dropped store (r4, see below).
    code, out = simulate(*flags)
    assert code == 0 and "gpu+cpu: " in out and "; 2 stores refused, 80 tokens never stored" in out
    assert json.loads(simulate(*flags, "--json")[1])["runs"][1]["requests"][4]["computed"]["not-stored"] == 64


def test_explain_names_a_dropped_store_as_the_cause_of_the_cpu_miss() -> None:
    # The first scenario above, explained: r4 reads d1 in pass 2 and finds none of it in CPU, because r1's store of
    # d1's blocks was refused twice and dropped. Of its 80 tokens, the CPU could have served 79 (vLLM recomputes
    # the last): d1.0-d1.3 (64 tokens) were never stored for that reason; its fresh question block (15 tokens
    # before the last) is new to the tier.
    s = scenario(docs=3, passes=2, gpu_blocks=7, cpu_blocks=8)
    engine = Engine("gpu+cpu", tier_spec(s, "gpu+cpu"), default_costs())
    attach(engine)
    run = SteppedEngine(engine, None, StepCosts.clock()).run(build_requests(s), ClosedLoop(1))
    assert run.records[4].computed == {LAST_TOKEN: 1, FIRST_SEEN: 15, NOT_STORED: 64}
    assert DESCRIPTIONS[NOT_STORED] == "not stored: the tier's blocks were still being written"
    # r3 (d0) missed d0.3 and its question: never offered before (r0's store of d0.3 was accepted, then evicted).
    assert NOT_STORED not in run.records[3].computed
