"""Invariants of the stepped engine at every step, over random workloads, budgets, concurrency and arrivals."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.sched.arrivals import Arrivals, ClosedLoop, OpenLoop, Timed
from sim.sched.config import SchedulerConfig
from sim.sched.step_costs import StepCosts
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.workloads.requests import build_requests
from sim.workloads.scenario import PassSpec, Scenario
from tests.sim.engine.test_properties import scenarios

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw: st.DrawFn) -> tuple[Scenario, SchedulerConfig, Arrivals]:
    s = draw(scenarios().filter(lambda s: s.granularity == "block"))
    out = draw(st.integers(1, 30))
    least = (-(-(s.prompt_tokens + out - 1) // s.block_size) + 1) * s.block_size
    s = Scenario.model_validate({**s.model_dump(), "output_tokens": out, "gpu_tokens": max(s.gpu_tokens, least)})
    seqs = draw(st.integers(1, 8))
    config = SchedulerConfig(
        max_num_batched_tokens=draw(st.integers(seqs, 300)), max_num_seqs=seqs,
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 8, 33])),
        enable_chunked_prefill=draw(st.booleans()), scheduler_reserve_full_isl=draw(st.booleans()),
        async_scheduling=draw(st.booleans()),
    )
    # Without chunked prefill vLLM needs the budget to hold a whole sequence (config/scheduler.py 317-360): a request
    # preempted after some decodes is prefilled again over its prompt and generated tokens.
    whole = s.prompt_tokens + out
    if not config.enable_chunked_prefill and config.max_num_batched_tokens < whole:
        config = SchedulerConfig(
            max_num_batched_tokens=whole, max_num_seqs=seqs, enable_chunked_prefill=False,
            async_scheduling=config.async_scheduling,
        )
    arrivals = draw(
        st.one_of(
            st.integers(1, 6).map(ClosedLoop),
            st.builds(OpenLoop, st.floats(1, 500), st.integers(0, 9)),
        )
    )
    return s, config, arrivals


@SETTINGS
@given(cases())
def test_every_step_keeps_the_invariants_and_every_request_finishes(case: tuple[Scenario, SchedulerConfig, Arrivals]) -> None:
    scenario, config, arrivals = case
    requests = build_requests(scenario)
    for run in scenario.run_names:
        engine = SteppedEngine(Engine(run, tier_spec(scenario, run), default_costs()), config)
        gpu = engine.gpu
        finished: list[int] = []
        for out in engine.steps(requests, arrivals):
            # Within the budget, and the threshold caps each request only when others run or wait.
            # (Scheduled a step ahead, a request may find the blocks it needs not yet freed and preempt itself alone.)
            assert 0 < out.scheduled_tokens <= config.max_num_batched_tokens or (config.async_scheduling and out.preempted)
            assert out.running <= config.max_num_seqs
            # No tier over capacity.
            assert gpu.cached_blocks <= gpu.capacity_blocks
            for store in engine.engine.offload:
                assert store.used_tokens <= store.capacity_tokens
            # No running request's block evicted: each is out of the free queue and keeps its hash.
            free = set(gpu.free_queue)
            for f in engine.running:
                assert not free & set(f.blocks)
                for i in range(f.num_cached_blocks):
                    assert gpu.block_hash[f.blocks[i]] == f.req.block_keys[i]
            # Every block is free, or held by a running request (shared ones counted once).
            assert len(free) + len(engine.refs) == gpu.capacity_blocks
            assert out.free_blocks == len(free)
            finished += out.finished
        assert sorted(finished) == [r.seq for r in requests]
        assert not engine.refs and len(gpu.free_queue) == gpu.capacity_blocks


def test_timestamps_and_an_idle_gap() -> None:
    # Two 10-token requests at 0 ms and 100 ms on the 1 ms clock: the first runs in step 1 (0-1 ms), the engine idles
    # until 100 ms, the second runs in step 2 (100-101 ms). Each waits nothing and has a TTFT of one step.
    s = Scenario(docs=2, doc_tokens=10, question_tokens=0, gpu_tokens=256, passes=[PassSpec()])
    engine = SteppedEngine(Engine("gpu", tier_spec(s, "gpu"), default_costs()), costs=StepCosts.clock())
    run = engine.run(build_requests(s), Timed((0.0, 100.0)))
    assert [(out.step, out.t_ms, out.scheduled) for out in run.steps] == [(1, 0.0, {0: 10}), (2, 100.0, {1: 10})]
    assert [r.ttft_ms for r in run.records] == [1.0, 1.0] and run.queue_ms == {0: 0.0, 1: 0.0}
