"""Golden scenarios of the stepped engine, each expected value derived in the comments (block size 16 throughout).

Most run on the clock costs (every step 1 ms), so times are step counts.
"""

from __future__ import annotations

import pytest

from sim.blocks.request import Request, Units
from sim.costs.model import default_costs
from sim.engine.loop import Engine, TierSpec
from sim.sched.arrivals import ClosedLoop
from sim.sched.config import CLASS_DEFAULTS, SchedulerConfig
from sim.sched.step_costs import StepCosts
from sim.sched.status import RequestStatus
from sim.sched.stepped import SteppedEngine, SteppedRun
from sim.simulation.run import tier_spec
from sim.workloads.presets import PRESETS
from sim.workloads.requests import build_requests
from sim.workloads.scenario import PassSpec, Scenario

BLOCK = 16


def stepped(scenario: Scenario, run: str = "gpu", config: SchedulerConfig | None = None, clock: bool = True) -> SteppedEngine:
    engine = Engine(run, tier_spec(scenario, run), default_costs())
    return SteppedEngine(engine, config, StepCosts.clock() if clock else None)


def lone_requests(lengths: list[int], output_tokens: int) -> list[Request]:
    """Requests sharing nothing: each its own block keys, no offload chunks."""
    out = []
    base = 0
    for seq, n in enumerate(lengths):
        kv = n + output_tokens - 1
        keys = list(range(base, base + kv // BLOCK))
        base += len(keys)
        out.append(Request(seq, 1, "forward", seq, n, keys, -(-kv // BLOCK), (n - 1) // BLOCK, [], 256, output_tokens=output_tokens))
    return out


def lone_engine(gpu_blocks: int, config: SchedulerConfig) -> SteppedEngine:
    engine = Engine("gpu", TierSpec(Units(BLOCK, 256), gpu_tokens=gpu_blocks * BLOCK), default_costs())
    return SteppedEngine(engine, config, StepCosts.clock())


def test_two_requests_with_one_document_in_one_step_the_second_hits_the_first() -> None:
    # One 64-token document (4 blocks) read twice, each time with a new 16-token question: prompts of 80 tokens.
    # Both arrive at t=0 (concurrency 2). Step 1 admits request 0 first: nothing cached, 80 tokens to compute, 5
    # blocks allocated and, as vLLM does at allocation, the 5 full blocks cached at once. Request 1 is looked up
    # after that, in the same step: its hit is capped at (80 - 1) // 16 = 4 blocks and the document's 4 blocks are
    # there, so it computes 16 tokens. 96 tokens in all, within the 8,192 budget; both sample their one token.
    s = Scenario(docs=1, doc_tokens=64, question_tokens=16, gpu_tokens=64 * BLOCK, passes=[PassSpec(), PassSpec()])
    run = stepped(s).run(build_requests(s), ClosedLoop(2))
    assert len(run.steps) == 1
    step = run.steps[0]
    assert step.scheduled == {0: 80, 1: 16}
    assert [(a.seq, a.hit_tokens) for a in step.admitted] == [(0, 0), (1, 64)]
    assert step.finished == [0, 1] and step.prefill_tokens == 96 and step.decode_tokens == 0
    assert [(r.gpu_hit_tokens, r.computed_tokens, r.ttft_ms) for r in run.records] == [(0, 80, 1.0), (64, 16, 1.0)]
    # Freed at the end: 64 blocks, one the null block, 63 usable, all free again.
    assert step.free_blocks == 63 and step.running == 0 and step.waiting == 0


def test_a_5024_token_prompt_under_a_2048_token_budget_takes_three_steps() -> None:
    # 5,011 + 13 = 5,024 tokens, a budget of 2,048 (vLLM's class default, and vllm serve's below 70 GiB): chunks
    # of 2,048, 2,048 and 5,024 - 4,096 = 928; the first token comes with the third. Blocks: 2,048 / 16 = 128 after
    # step 1, 256 after step 2, 5,024 / 16 = 314 after step 3, each full block cached as it is allocated.
    s = Scenario(docs=1, doc_tokens=5011, question_tokens=13, gpu_tokens=21520, passes=[PassSpec()])
    engine = stepped(s, config=CLASS_DEFAULTS)
    usable = 21520 // BLOCK - 1  # 1,344
    seen = []
    for out in engine.steps(build_requests(s), ClosedLoop(1)):
        seen.append((out.scheduled, out.free_blocks, engine.gpu.cached_blocks))
    assert seen == [
        ({0: 2048}, usable - 128, 128),
        ({0: 2048}, usable - 256, 256),
        ({0: 928}, usable, 314),  # finished: all 314 back in the free queue, still cached
    ]


def test_chunked_ttft_pays_the_fixed_cost_once_a_step() -> None:
    # The same prompt priced by the seed fit: one step costs overhead + prefill x tokens (+ store), so three steps
    # cost what the sequential engine charges (overhead once, prefill x 5,024) plus the overhead twice more.
    s = Scenario(docs=1, doc_tokens=5011, question_tokens=13, gpu_tokens=21520, passes=[PassSpec()])
    requests = build_requests(s)
    sequential = Engine("gpu", tier_spec(s, "gpu"), default_costs()).run_all(requests)[0].ttft_ms
    run = stepped(s, config=CLASS_DEFAULTS, clock=False).run(requests)
    assert run.records[0].ttft_ms == pytest.approx(sequential + 2 * default_costs().overhead_ms, abs=0.002)
    # Under the default budget (8,192) it is one step, and exactly the sequential TTFT.
    assert stepped(s, clock=False).run(requests).records[0].ttft_ms == sequential


def test_kv_pressure_three_long_prompts_room_for_two() -> None:
    # Three 64-token prompts (4 blocks each), 33 output tokens each (KV of 64 + 32 = 96 tokens: 6 blocks at the
    # end), all arriving at t=0; 12 blocks, 11 usable. A, B, C are requests 0, 1, 2 (documents 0, 1, 2).
    s = Scenario(docs=3, doc_tokens=64, question_tokens=0, output_tokens=33, gpu_tokens=12 * BLOCK, passes=[PassSpec()])
    run = stepped(s).run(build_requests(s), ClosedLoop(3))
    by_step = {out.step: out for out in run.steps}
    # Step 1: A and B get their 4 blocks each (free 11 -> 3); C needs its whole prompt's 4 blocks (reserve full
    # ISL) and 3 are free: it waits, and admission stops there.
    assert by_step[1].scheduled == {0: 64, 1: 64} and by_step[1].waiting == 1
    # Step 2: each decodes token 65 into a 5th block (free 3 -> 1). A and B then decode a token a step; token k of
    # the KV needs block ceil(k / 16), so token 81 (step 18) needs a 6th block. A, first in the running queue, takes
    # the last free block; B finds none and, the newest running request, preempts itself. Its 5 blocks (4 of the
    # prompt, 1 of generated tokens 65-80) are freed tail first but stay cached. No admission in that step.
    preempting = {out.step: out.preempted for out in run.steps if out.preempted}
    assert preempting == {18: [1]}
    assert by_step[18].scheduled == {0: 1} and by_step[18].admitted == []
    # Steps 19-33: B, back at the head of the queue with 17 generated tokens (81 in all), would hit 80 tokens, but
    # its whole sequence needs 6 blocks: 5 hits sitting in the free queue + 1 new, and only 5 blocks are free (A
    # holds 6). It waits, and C behind it. A samples its 33rd token at step 33 and frees its 6 blocks.
    assert all(out.scheduled == {0: 1} for out in run.steps[18:33])
    assert by_step[33].finished == [0]
    # Step 34: B is admitted again with 80 tokens hit (its prompt and the 16 generated tokens it had cached) and
    # computes 1; its new block is the front of the free queue, A's last block (tokens 80-96, generated). C follows:
    # 4 blocks for its prompt, evicting A's blocks 5, 4, 3, 2 (positions 4 down to 1; A's first block survives).
    assert [(a.seq, a.hit_tokens) for a in by_step[34].admitted] == [(1, 80), (2, 0)]
    assert by_step[34].scheduled == {1: 1, 2: 64}
    # A record's evictions cover the request's whole life. B allocates nothing after step 34 (6 blocks hold its 96
    # KV tokens). C takes a 5th block at step 35: the last free one, A's first block (position 0), so A's document
    # lost positions 0-4 to C. B finishes at step 49 (its 33rd token: 18 at step 34, one a step), freeing its 6
    # blocks tail first; C's 6th block (token 81, at step 50) is then the front: B's last block (tokens 80-96).
    a, b, c = run.records
    assert [(e["doc"], e["tokens"], e["start"], e["end"]) for e in b.evicted] == [(0, 16, 80, 96)]
    assert [(e["doc"], e["tokens"], e["start"], e["end"]) for e in c.evicted] == [(0, 80, 0, 80), (1, 16, 80, 96)]
    assert by_step[49].finished == [1]
    # TTFT: A and B at step 1 (1 ms, B's preemption came later); C waited 33 steps and got its token at step 34.
    assert (a.ttft_ms, b.ttft_ms, c.ttft_ms) == (1.0, 1.0, 34.0)
    flights = {f.seq: f for f in run.flights}
    assert (flights[1].preemptions, flights[1].admissions) == (1, [0, 80])
    assert run.queue_ms == {0: 0.0, 1: 0.0, 2: 33.0}
    # Everything finished with its 33 tokens and every block came back.
    assert all(f.num_output == 33 and f.done for f in run.flights)
    assert run.steps[-1].free_blocks == 11


def test_upstream_concurrent_partial_requests() -> None:
    # vLLM's test_schedule_concurrent_partial_requests (tests/v1/core/test_scheduler.py): three 800-token prompts,
    # a 1,024 budget, long_prefill_token_threshold 400. Step 1: 400, 400, then 1,024 - 800 = 224. Step 2: the same.
    # Step 3: the first two have computed 800 and sampled: 1 each; the third its remaining 800 - 448 = 352.
    config = SchedulerConfig(max_num_batched_tokens=1024, max_num_seqs=16, long_prefill_token_threshold=400)
    engine = lone_engine(10_000, config)
    steps = engine.steps(lone_requests([800, 800, 800], output_tokens=3), ClosedLoop(3))
    assert [next(steps).scheduled for _ in range(3)] == [
        {0: 400, 1: 400, 2: 224}, {0: 400, 1: 400, 2: 224}, {0: 1, 1: 1, 2: 352},
    ]


def test_upstream_long_prefill_threshold_only_when_others_wait() -> None:
    # test_long_prefill_threshold_ignored_when_alone: a lone 2,000-token prompt under a 1,024 budget and a 400
    # threshold gets the whole budget; test_long_prefill_threshold_applies_with_other_requests: with a 10-token
    # request queued behind it, 400 and 10.
    config = SchedulerConfig(max_num_batched_tokens=1024, max_num_seqs=16, long_prefill_token_threshold=400)
    alone = lone_engine(10_000, config).steps(lone_requests([2000], 1), ClosedLoop(1))
    assert next(alone).scheduled == {0: 1024}
    both = lone_engine(10_000, config).steps(lone_requests([2000, 10], 1), ClosedLoop(2))
    assert next(both).scheduled == {0: 400, 1: 10}


@pytest.mark.parametrize(("chunked", "admitted"), [(True, 2), (False, 1)])
def test_upstream_schedule_order(chunked: bool, admitted: int) -> None:
    # test_schedule_order: two 800-token then two 10-token prompts, a 1,024 budget, max_num_seqs 3. Chunked: 800,
    # then 224 of the second; the budget is gone. Not chunked: the second does not fit whole, and admission stops
    # there rather than skipping to the short ones.
    config = SchedulerConfig(max_num_batched_tokens=1024, max_num_seqs=3, enable_chunked_prefill=chunked)
    first = next(lone_engine(10_000, config).steps(lone_requests([800, 800, 10, 10], 1), ClosedLoop(4)))
    assert len(first.admitted) == admitted
    assert first.scheduled == ({0: 800, 1: 224} if chunked else {0: 800})


def test_max_num_seqs_caps_the_running_requests() -> None:
    # Four 10-token prompts, max_num_seqs 2: two admitted in step 1, the other two in step 2 once those finished.
    config = SchedulerConfig(max_num_batched_tokens=1024, max_num_seqs=2)
    run: SteppedRun = lone_engine(100, config).run(lone_requests([10] * 4, 1), ClosedLoop(4))
    assert [out.scheduled for out in run.steps] == [{0: 10, 1: 10}, {2: 10, 3: 10}]
    assert [r.ttft_ms for r in run.records] == [1.0, 1.0, 2.0, 2.0]


def test_a_waiting_request_that_cannot_get_blocks_stops_admission_behind_it() -> None:
    # 11 usable blocks; prompts of 64, 160 and 16 tokens (4, 10 and 1 blocks), all arriving at once. Step 1: the
    # first takes 4 (7 left); the second needs 10 and waits; the third would fit in 1 but FCFS stops at the second
    # (scheduler.py 1454-1461: break, not skip). Step 2: the first has finished and freed its 4: 10 + 1 fit.
    config = SchedulerConfig(max_num_batched_tokens=1024, max_num_seqs=16)
    run = lone_engine(12, config).run(lone_requests([64, 160, 16], 1), ClosedLoop(3))
    assert [out.scheduled for out in run.steps] == [{0: 64}, {1: 160, 2: 16}]


@pytest.mark.parametrize(("reserve", "first"), [(True, {0: 32}), (False, {0: 32, 1: 32})])
def test_reserve_full_isl_admits_only_a_prompt_that_fits_whole(reserve: bool, first: dict[int, int]) -> None:
    # Two 160-token prompts (10 blocks each), 11 usable blocks, chunks capped at 32 tokens (2 blocks) by
    # long_prefill_token_threshold (two requests wait, so it applies). The first gets its 2 blocks (9 left). With
    # scheduler_reserve_full_isl the second needs all 10 of its blocks free and waits; without, its first chunk's 2
    # fit and it is admitted too (kv_cache_manager.py 531-542).
    config = SchedulerConfig(
        max_num_batched_tokens=1024, max_num_seqs=16, long_prefill_token_threshold=32, scheduler_reserve_full_isl=reserve
    )
    run = lone_engine(12, config).run(lone_requests([160, 160], 1), ClosedLoop(2))
    assert run.steps[0].scheduled == first


def test_lmcache_looks_a_waiting_request_up_once_per_admission(monkeypatch: pytest.MonkeyPatch) -> None:
    # The KV-pressure scenario above with a CPU tier. LMCache answers a request from its lookup cache until it is
    # allocated (vllm_v1_adapter.py 1381-1432), so each admission costs one lookup, however long the wait: A once
    # (step 1), B twice (step 1; then from step 19, after its preemption, until step 34), C once (step 1, waiting
    # until step 34). Four lookups, not one per step of waiting (C alone was asked 34 times).
    s = Scenario(
        docs=3, doc_tokens=64, question_tokens=0, output_tokens=33, gpu_tokens=12 * BLOCK, cpu_gb=None, cpu_tokens=4096,
        passes=[PassSpec()],
    )
    engine = stepped(s, run="gpu+cpu")
    looked: list[int] = []
    lookup = engine.engine.lmcache_lookup
    monkeypatch.setattr(engine.engine, "lmcache_lookup", lambda req: looked.append(req.seq) or lookup(req))
    run = engine.run(build_requests(s), ClosedLoop(3))
    assert sorted(looked) == [0, 1, 1, 2]
    assert {f.seq: f.admissions for f in run.flights} == {0: [0], 1: [0, 80], 2: [0]}


def test_an_lmcache_load_lands_in_the_step_that_admits_the_request() -> None:
    # Two seed-lab documents (5,024-token prompts) read twice, one at a time, on a GPU that holds one prompt (315
    # blocks, 314 usable: 5,024 / 16 = 314). Pass 1 stores each prompt's 19 full 256-token chunks (4,864 tokens) in
    # the CPU tier (the 160 left are a partial chunk, not saved). In pass 2 document 0's blocks are gone (document
    # 1's prompt took the whole pool), so request 2 finds no GPU hit, loads 4,864 tokens from CPU and computes 160;
    # LMCache saves nothing (no full chunk beyond its own hit). That step costs overhead + 160 x prefill + 4,864 x
    # CPU load, and LMCache's load is in it: the step that admits the request.
    s = Scenario(docs=2, doc_tokens=5011, question_tokens=13, gpu_tokens=5040, cpu_gb=None, cpu_tokens=50_000,
                 passes=[PassSpec(), PassSpec()])
    run = stepped(s, run="gpu+cpu", clock=False).run(build_requests(s))
    step = run.steps[2]
    assert step.scheduled == {2: 160} and step.admitted[0].hit_tokens == 4864
    assert step.loaded == {"cpu": 4864} and step.stored == {}
    c = default_costs()
    assert step.dt_ms == pytest.approx(c.overhead_ms + 160 * c.prefill_ms_per_token + 4864 * c.load_cpu_ms_per_token)
    assert run.records[2].ttft_ms == round(step.dt_ms, 3) and run.records[2].cpu_hit_tokens == 4864


def test_the_seed_lab_at_four_in_flight_passes_one_and_two() -> None:
    # The seed lab (10 documents, 5,024-token prompts of 314 blocks, 1,344 usable blocks, CPU tier of 1.5 GiB =
    # 56,173 tokens at 28,672 B/token) with 4 requests in flight.
    # gpu run: every request computes its whole prompt, so prefills end in admission order (a running request is
    # scheduled first and needs at most two steps of 8,192), and requests finish in seq order. Document d is read by
    # seq d and seq d + 10. Seq d + 4 arrives when seq d finishes, so seqs d+4 .. d+8 are admitted after seq d's
    # blocks went back to the free queue and are allocated whole (their prompts done) before seq d + 10 is looked
    # up: 5 x 314 = 1,570 blocks taken from the front of a queue of at most 1,344, so none of document d is left.
    # No GPU hit in passes 1 and 2, as at concurrency 1.
    # gpu+cpu run: the CPU tier never fills (48,640 tokens of full chunks in all). Seq d + 10 arrives at the
    # (d + 7)th finish (4 arrive at once, then one per finish), and those finishes include seq d's: while it waits
    # or runs, at most 3 later requests can finish before it. Its 19 full chunks were stored when its prefill ended,
    # so each pass-2 request loads 4,864 tokens from CPU (the 160 left are a partial chunk, never stored).
    s = Scenario(**PRESETS["seed-lab"])
    runs = {name: stepped(s, run=name, clock=False).run(build_requests(s), ClosedLoop(4)) for name in s.run_names}
    gpu = runs["gpu"].records
    assert all(r.gpu_hit_tokens == 0 for r in gpu if r.pass_ in (1, 2))
    cpu = runs["gpu+cpu"].records
    assert [r.cpu_hit_tokens for r in cpu if r.pass_ == 2] == [4864] * 10
    assert all(r.cpu_hit_tokens == 0 for r in cpu if r.pass_ == 1)


def test_max_model_len_caps_a_request_and_refuses_a_prompt_that_reaches_it() -> None:
    # max_model_len 40, a 32-token prompt asking for 20 tokens. Step 1 prefills and samples token 1 (33 tokens); each
    # step after decodes one; check_stop (sched/utils.py 114-119) ends it when prompt + output reaches 40: 8 tokens
    # at step 8, not 20.
    config = SchedulerConfig(max_num_batched_tokens=1024, max_num_seqs=16, max_model_len=40)
    run = lone_engine(100, config).run(lone_requests([32], 20), ClosedLoop(1))
    assert len(run.steps) == 8 and run.flights[0].num_output == 8 and run.steps[-1].finished == [0]
    with pytest.raises(ValueError, match=r"request 0: prompt of 40 tokens is not below max_model_len \(40\)"):
        lone_engine(100, config).run(lone_requests([40], 1), ClosedLoop(1))


def test_requests_arriving_between_steps_and_an_abort_free_the_aborted_requests_blocks() -> None:
    # A server drives the engine a step at a time (the emulator): requests arrive between steps and a client may
    # leave. Two lone requests of 40 tokens and 4 output tokens each need ceil((40 + 4 - 1) / 16) = 3 blocks; the
    # pool has 8 (7 usable, one the null block). Request 0 arrives and step 1 prefills it (40 tokens: 3 blocks,
    # 4 free). Request 1 arrives; step 2 decodes request 0 and prefills request 1 (3 more blocks: 1 free). Request
    # 1's client leaves: aborted between steps, it leaves the running list and its 3 blocks go back (4 free), and
    # step 3 schedules request 0 alone. A request aborted while waiting simply leaves the queue.
    engine = lone_engine(8, CLASS_DEFAULTS)
    r0, r1, r2 = lone_requests([40, 40, 40], 4)
    f0 = engine.arrive(r0, 0.0)
    assert engine.step().scheduled == {0: 40} and len(engine.gpu.free_queue) == 4
    f1 = engine.arrive(r1, engine.now_ms)
    assert engine.step().scheduled == {0: 1, 1: 40} and len(engine.gpu.free_queue) == 1
    engine.abort(f1)
    assert f1.status == RequestStatus.FINISHED_ABORTED and f1.done and f1.blocks == []
    assert engine.running == [f0] and len(engine.gpu.free_queue) == 4
    f2 = engine.arrive(r2, engine.now_ms)
    engine.abort(f2)
    assert len(engine.waiting) == 0 and f2.status == RequestStatus.FINISHED_ABORTED
    out = engine.step()
    assert out.scheduled == {0: 1} and (out.running, out.waiting) == (1, 0)
    engine.abort(f1)  # aborting a finished request again changes nothing
    assert len(engine.gpu.free_queue) == 4


def test_arrive_refuses_a_request_the_pool_could_never_hold() -> None:
    engine = lone_engine(4, CLASS_DEFAULTS)  # 3 usable blocks
    (big,) = lone_requests([100], 1)  # ceil(100 / 16) = 7 blocks
    with pytest.raises(ValueError, match="needs 7 GPU blocks, the pool has 3"):
        engine.arrive(big, 0.0)
