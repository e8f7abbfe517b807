"""vLLM's native offloading in the stepped engine: asynchronous loads (WAITING_FOR_REMOTE_KVS), each value derived below.

Block size 16 and vLLM's default of one GPU block per offload block (16 tokens). Steps cost 1 ms and each token
loaded from CPU 1/64 ms, so a step that only loads 128 tokens lasts 2 ms (it runs no forward pass, so no fixed cost).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.costs.model import CostModel, default_costs
from sim.engine.loop import Engine
from sim.sched.arrivals import Arrivals, ClosedLoop, OpenLoop, Timed
from sim.sched.config import SchedulerConfig
from sim.sched.step_costs import StepCosts
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.workloads.presets import PRESETS
from sim.workloads.requests import build_requests
from sim.workloads.scenario import PassSpec, Scenario
from tests.sim.sched.test_sched_equivalence import same_records
from tests.sim.tiers.test_vllm_native import native_scenarios

BLOCK = 16
LOAD_COSTS = StepCosts(
    CostModel(
        overhead_ms=1, prefill_ms_per_token=0, load_cpu_ms_per_token=1 / 64, load_disk_ms_per_token=0,
        store_ms_per_token=0, source="test",
    )
)


def native(scenario: Scenario) -> SteppedEngine:
    return SteppedEngine(Engine("gpu+cpu", tier_spec(scenario, "gpu+cpu"), default_costs()), None, LOAD_COSTS)


def four_docs_then_one_twice() -> Scenario:
    # Four 128-token documents, each read with a fresh 16-token question: 144-token prompts, 9 blocks each. The GPU
    # has 21 blocks, 20 usable: reading d1, d2 and d3 evicts all of d0 (d1 takes 9 of the 11 never used blocks; d2
    # the last 2 and d0's blocks 8..2, tail first; d3 d0's blocks 1 and 0 and d1's 8..2). The CPU holds everything.
    return Scenario(
        docs=4, doc_tokens=128, question_tokens=16, gpu_tokens=21 * BLOCK, cpu_tokens=64 * BLOCK,
        cpu_backend="vllm-native", passes=[PassSpec(), PassSpec(order="list", docs=(0, 0))],
    )


def test_a_cpu_hit_loads_in_its_own_step_holding_its_blocks_and_a_second_reader_waits_for_it() -> None:
    # Pass 1 comes 10 ms apart, one step each. At t=40 two requests for d0 arrive together.
    s = four_docs_then_one_twice()
    engine = native(s)
    seen = []
    for out in engine.steps(build_requests(s), Timed((0, 10, 20, 30, 40, 40))):
        seen.append(out)
    # Step 5: request 4 misses the GPU (d0 evicted) and finds d0's 8 document blocks in CPU (the 9th block holds
    # a question it has not seen): 128 tokens, loaded asynchronously (scheduler.py 1286-1289). It gets 8 blocks, is
    # scheduled for nothing, and waits in WAITING_FOR_REMOTE_KVS. Request 5 misses the GPU too (request 4's blocks
    # are not cached until its load is done) and its CPU hit is being loaded by request 4: its lookup is deferred
    # (offloading/scheduler.py 1022-1044), though 12 blocks are free for a load of its own. Nothing to compute:
    # the step lasts its load, 128 / 64 = 2 ms.
    load = seen[4]
    assert (load.scheduled, load.admitted, load.loaded) == ({}, [], {"cpu": 128})
    assert (load.t_ms, load.dt_ms) == (40, 2.0)
    assert (load.free_blocks, load.running, load.waiting) == (20 - 8, 0, 2)
    # Step 6: the load is done (reported with step 5's output). Request 4 is drained first, its 8 blocks cached,
    # and computes the 16 question tokens in a 9th block. Request 5 is looked up again: now it hits the 8 blocks
    # request 4 loaded, on the GPU (capped at (144 - 1) // 16 = 8 blocks), and computes its own 16 in a block of
    # its own. One step of 1 ms, both done at 43 ms.
    run = seen[5]
    assert run.scheduled == {4: 16, 5: 16}
    assert [(a.seq, a.hit_tokens) for a in run.admitted] == [(4, 128), (5, 128)]
    assert (run.t_ms, run.dt_ms, run.finished) == (42.0, 1.0, [4, 5])
    assert len(seen) == 6


def test_the_records_of_a_load_and_of_the_request_that_waited_for_it() -> None:
    s = four_docs_then_one_twice()
    run = native(s).run(build_requests(s), Timed((0, 10, 20, 30, 40, 40)))
    rows = [(r.gpu_hit_tokens, r.cpu_hit_tokens, r.computed_tokens, r.ttft_ms) for r in run.records[4:]]
    # Request 4: 128 from CPU, 16 computed, first token at 43 ms for an arrival at 40: 2 ms loading, 1 ms computing,
    # as the sequential engine charges it (1 ms + 128 / 64 ms). Request 5: 128 from the GPU (request 4's loaded
    # blocks), 16 computed, also 3 ms: it waited the 2 ms of the load before it was first scheduled.
    assert rows == [(0, 128, 16, 3.0), (128, 0, 16, 3.0)]
    assert run.queue_ms[4] == 0 and run.queue_ms[5] == 2.0


def test_the_seed_lab_at_concurrency_one_is_the_sequential_run() -> None:
    # Every CPU hit of pass 2 loads in a step of its own (as many such steps as requests with a CPU hit), then computes the
    # rest: hits, stored tokens and TTFTs (load, then overhead and prefill) are the sequential engine's.
    same_records(Scenario(**{**PRESETS["seed-lab"], "cpu_backend": "vllm-native"}))
    s = Scenario(**{**PRESETS["seed-lab"], "cpu_backend": "vllm-native"})
    run = SteppedEngine(Engine("gpu+cpu", tier_spec(s, "gpu+cpu"), default_costs())).run(build_requests(s), ClosedLoop(1))
    assert sum(1 for out in run.steps if not out.scheduled and out.loaded) == sum(
        1 for r in run.records if r.cpu_hit_tokens
    )


@st.composite
def roomy_native_scenarios(draw: st.DrawFn) -> Scenario:
    """vLLM-native scenarios whose CPU tier holds every block the workload could store: no store is ever refused."""
    s = draw(native_scenarios())
    tokens = sum(r.prompt_tokens + r.output_tokens for r in build_requests(s))
    return Scenario.model_validate({**s.model_dump(), "cpu_tokens": max(s.cpu_tokens or 0, tokens)})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(roomy_native_scenarios())
def test_with_room_for_everything_native_at_concurrency_one_is_the_sequential_run(scenario: Scenario) -> None:
    # With room for every block nothing is evicted, so a store never meets a block still being written: none is
    # refused. One request at a time, the next request's lookup never reaches a block still being written unless it
    # reads what the request before it wrote; then it waits one step and finds it ready. The finish handed over one
    # schedule later re-ranks blocks that are never evicted. Hits, computed and stored tokens are the sequential
    # engine's, and so is every TTFT but those of requests that waited for a store (they wait its copy).
    requests = build_requests(scenario)
    fields = ("gpu_hit_tokens", "tier_hits", "computed_tokens", "stored_tokens", "source")
    sequential = Engine("gpu+cpu", tier_spec(scenario, "gpu+cpu"), default_costs()).run_all(requests)
    stepped = SteppedEngine(Engine("gpu+cpu", tier_spec(scenario, "gpu+cpu"), default_costs())).run(requests, ClosedLoop(1))
    assert [[getattr(r, f) for f in fields] for r in stepped.records] == [[getattr(r, f) for f in fields] for r in sequential]
    assert all(a.ttft_ms >= b.ttft_ms - 0.001 for a, b in zip(stepped.records, sequential))
    assert not any(f.store_refused for f in stepped.flights)


@st.composite
def native_under_load(draw: st.DrawFn) -> tuple[Scenario, SchedulerConfig, Arrivals]:
    s = draw(native_scenarios())
    least = (-(-(s.prompt_tokens + s.output_tokens - 1) // s.block_size) + 1) * s.block_size
    s = Scenario.model_validate({**s.model_dump(), "gpu_tokens": max(s.gpu_tokens, least)})
    seqs = draw(st.integers(1, 6))
    config = SchedulerConfig(
        max_num_batched_tokens=draw(st.integers(max(seqs, 8), 200)), max_num_seqs=seqs, async_scheduling=draw(st.booleans())
    )
    arrivals = draw(st.one_of(st.integers(1, 5).map(ClosedLoop), st.builds(OpenLoop, st.floats(1, 500), st.integers(0, 9))))
    return s, config, arrivals


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(native_under_load())
def test_native_under_load_keeps_the_invariants_and_every_request_finishes(
    case: tuple[Scenario, SchedulerConfig, Arrivals],
) -> None:
    scenario, config, arrivals = case
    requests = build_requests(scenario)
    engine = SteppedEngine(Engine("gpu+cpu", tier_spec(scenario, "gpu+cpu"), default_costs()), config)
    tier, gpu = engine.engine.native_cpu, engine.gpu
    assert tier is not None
    finished: list[int] = []
    for out in engine.steps(requests, arrivals):
        assert out.scheduled_tokens <= config.max_num_batched_tokens and out.running <= config.max_num_seqs
        # The CPU tier within its capacity; every block being written or read is one it holds.
        assert len(tier.chunks) <= tier.capacity_chunks and tier.used_tokens <= tier.capacity_tokens
        assert tier.pending <= set(tier.chunks) and set(tier.pinned) <= set(tier.chunks)
        # Every GPU block is free, held (by a running request, or one loading its CPU hit) or, under asynchronous
        # scheduling, freed but kept from the pool while a step in flight may write it; never two of these.
        free, deferred = set(gpu.free_queue), {b for _, blocks, _ in engine._deferred for b in blocks}
        assert len(free) + len(engine.refs) + len(deferred) == gpu.capacity_blocks
        assert not free & set(engine.refs) and not deferred & (free | set(engine.refs))
        finished += out.finished
    assert sorted(finished) == [r.seq for r in requests]
    assert not engine.refs and not tier.pinned
