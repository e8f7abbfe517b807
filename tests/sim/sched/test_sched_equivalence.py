"""At concurrency 1 the stepped engine is the sequential engine: the same records, field for field, over random scenarios."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.sched.arrivals import ClosedLoop
from sim.sched.config import SchedulerConfig
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.workloads.presets import PRESETS
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario
from tests.sim.engine.test_properties import scenarios

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def scenarios_with_decode(draw: st.DrawFn) -> Scenario:
    """The engine's property scenarios in block granularity (whole documents are not vLLM's), with up to 40
    generated tokens."""
    s = draw(scenarios().filter(lambda s: s.granularity == "block"))
    out = draw(st.one_of(st.just(1), st.integers(2, 40)))
    # Room for one request's prompt and generated KV, and a block more, as the strategy gives the prompt alone.
    least = (-(-(s.prompt_tokens + out - 1) // s.block_size) + 1) * s.block_size
    return Scenario.model_validate({**s.model_dump(), "output_tokens": out, "gpu_tokens": max(s.gpu_tokens, least)})


def same_records(scenario: Scenario) -> None:
    """Equal records; with generated tokens, equal but for the evictions a re-cached block is counted as.

    The sequential engine allocates a request's prompt and decode blocks
    together and caches the prompt's blocks after: a popped block holding a
    key the prompt caches again (the recomputed last block of a fully cached
    prompt) is recorded as evicted. The stepped engine caches the prompt's
    blocks at its prefill step, as vLLM does, so a decode block that pops
    the old holder later drops a copy (no data lost, no eviction). Hits,
    TTFTs and what each tier holds are the same either way.
    """
    requests = build_requests(scenario)
    decode = scenario.output_tokens > 1
    for run in scenario.run_names:
        sequential = Engine(run, tier_spec(scenario, run), default_costs()).run_all(requests)
        stepped = SteppedEngine(Engine(run, tier_spec(scenario, run), default_costs())).run(requests, ClosedLoop(1))
        mine, theirs = [r.to_dict() for r in stepped.records], [r.to_dict() for r in sequential]
        if decode:
            for r in mine + theirs:
                del r["evicted"]
        assert mine == theirs, run


@SETTINGS
@given(scenarios_with_decode())
def test_concurrency_one_reproduces_the_sequential_records(scenario: Scenario) -> None:
    same_records(scenario)


def test_the_seed_lab_at_concurrency_one() -> None:
    # Every seed prompt (5,024 tokens) fits the default budget of 8,192 in one step: one step alone costs what the
    # cost model charges the request, so each TTFT is the sequential one exactly, and so are the hits.
    same_records(Scenario(**PRESETS["seed-lab"]))


@SETTINGS
@given(scenarios_with_decode(), st.integers(1, 64))
def test_chunked_prefill_at_concurrency_one_keeps_every_hit(scenario: Scenario, budget: int) -> None:
    # A budget smaller than the prompt splits its prefill over several steps: the blocks are allocated and cached
    # chunk by chunk instead of at once, but nothing else runs, so every later request finds the same blocks and
    # chunks cached. Hits, computed and stored tokens are the sequential engine's; only TTFT grows (a fixed cost per
    # step) and evictions may be counted as copies dropped (see same_records).
    requests = build_requests(scenario)
    config = SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=1)
    fields = ("gpu_hit_tokens", "tier_hits", "computed_tokens", "stored_tokens", "source")
    for run in scenario.run_names:
        sequential = Engine(run, tier_spec(scenario, run), default_costs()).run_all(requests)
        stepped = SteppedEngine(Engine(run, tier_spec(scenario, run), default_costs()), config).run(requests, ClosedLoop(1))
        assert [[getattr(r, f) for f in fields] for r in stepped.records] == [[getattr(r, f) for f in fields] for r in sequential]
        assert all(a.ttft_ms >= b.ttft_ms - 0.001 for a, b in zip(stepped.records, sequential))
