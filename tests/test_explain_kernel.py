"""The compiled attribution (sim.explain_kernel) gives exactly what the Python observer gives: every request's
``gpu_miss``, ``computed``, evicted detail and infinite-cache bound, and the totals, on random traces and the
Mooncake sample."""

from __future__ import annotations

from array import array
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import compiled
from sim.costs import default_costs
from sim.engine import Engine
from sim.explain import attach
from sim.explain.summary import totals
from sim.replay import ReplayTiers, run_replay, trace_requests
from sim.trace import Trace, open_trace
from tests.test_compiled import traces

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


def grows_kv(trace: Trace) -> bool:
    """Whether the replay's requests (``trace_requests``) grow their KV by decode past their prompt's blocks."""
    return any(len(r.block_keys) > r.prompt_tokens // trace.block_tokens for r in trace_requests(trace, 1))


def replay_outputs(trace: Trace) -> Any:
    """The output tokens the attribution kernel takes: the trace's, if the replay grows KV by decode."""
    return trace.output_tokens if grows_kv(trace) else None


def gpu_blocks_needed(trace: Trace) -> int:
    """The blocks the trace's largest request holds, its decode's included if the replay has any."""
    return max(r.alloc_blocks for r in trace_requests(trace, 1))


def python_explained(trace: Trace, tiers: ReplayTiers) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The reference: the Python engine with the observer attached, request by request."""
    engine = Engine(tiers.run, tiers.spec(trace.block_tokens), default_costs())
    attach(engine)
    records = engine.run_all(trace_requests(trace, tiers.chunk_blocks))
    return [r.to_dict() for r in records], totals(records)


def compiled_explained(trace: Trace, tiers: ReplayTiers, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    monkeypatch.setenv(compiled.ENGINE_ENV, "compiled")
    outcome = run_replay(trace, tiers, explain=True)
    assert outcome.engine == "compiled"
    totals_ = outcome.totals()
    return [r.to_dict() for r in outcome.records()], {k: totals_[k] for k in (
        "gpu_miss", "computed", "served_tokens", "infinite_hit_tokens", "hit_ratio", "infinite_hit_ratio")}


FIELDS = ("gpu_hit_tokens", "computed_tokens", "gpu_miss", "computed", "evicted_misses", "infinite_hit_tokens")


def kernel_fields(trace: Trace, tiers: ReplayTiers) -> list[dict[str, Any]]:
    """The attribution kernel called directly (any CPU backend): per request, its run's GPU hit and computed
    tokens and the attribution, the fields ``FIELDS`` of a record."""
    from sim import explain_kernel
    from sim.explain.columns import explain_trace

    columns = explain_trace(trace, tiers, output_tokens=replay_outputs(trace))
    assert columns is not None
    out = []
    for i in range(len(columns)):
        done = columns[i]
        out.append({"gpu_hit_tokens": int(columns.table[i, explain_kernel.GPU_HIT]),
                    "computed_tokens": int(columns.table[i, explain_kernel.COMPUTED]), "gpu_miss": done.gpu_miss,
                    "computed": done.computed, "evicted_misses": done.evicted_misses,
                    "infinite_hit_tokens": done.infinite_hit_tokens})
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces(), gpu_extra=st.integers(0, 30), cpu=st.integers(1, 40), chunk_blocks=st.integers(1, 3))
def test_the_kernel_follows_lmcaches_rules_as_the_engine_does_on_random_traces(
    trace: Trace, gpu_extra: int, cpu: int, chunk_blocks: int
) -> None:
    tiers = ReplayTiers(gpu_blocks_needed(trace) + gpu_extra, max(cpu, chunk_blocks), chunk_blocks, "lmcache")
    expected = [{k: r[k] for k in FIELDS} for r in python_explained(trace, tiers)[0]]
    assert kernel_fields(trace, tiers) == expected


@pytest.mark.parametrize(("gpu_blocks", "cpu_blocks", "chunk_blocks"), [(400, 4000, 1), (1000, 6000, 4)])
def test_the_kernel_follows_lmcaches_rules_on_the_mooncake_sample(gpu_blocks: int, cpu_blocks: int, chunk_blocks: int) -> None:
    trace = open_trace("mooncake-synthetic")
    tiers = ReplayTiers(gpu_blocks, cpu_blocks, chunk_blocks, "lmcache")
    expected = [{k: r[k] for k in FIELDS} for r in python_explained(trace, tiers)[0]]
    assert kernel_fields(trace, tiers) == expected
    assert any("evicted" in r["computed"] for r in expected)  # the CPU tier evicts: the rules matter


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces(), gpu_extra=st.integers(0, 30), cpu=st.one_of(st.none(), st.integers(1, 40)), chunk_blocks=st.integers(1, 3))
def test_compiled_attribution_equals_the_observers_on_random_traces(
    trace: Trace, gpu_extra: int, cpu: int | None, chunk_blocks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu_blocks = None if cpu is None else max(cpu, chunk_blocks)
    tiers = ReplayTiers(gpu_blocks_needed(trace) + gpu_extra, cpu_blocks, chunk_blocks)
    assert compiled_explained(trace, tiers, monkeypatch) == python_explained(trace, tiers)


@pytest.mark.parametrize(("gpu_blocks", "cpu_blocks", "chunk_blocks"), [(400, None, 1), (400, 4000, 1), (1000, 6000, 4)])
def test_compiled_attribution_equals_the_observers_on_the_mooncake_sample(
    gpu_blocks: int, cpu_blocks: int | None, chunk_blocks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = open_trace("mooncake-synthetic")
    tiers = ReplayTiers(gpu_blocks, cpu_blocks, chunk_blocks)
    expected = python_explained(trace, tiers)
    assert compiled_explained(trace, tiers, monkeypatch) == expected
    # The comparison means something: the main causes occur (the sample evicts tails first, so
    # it has no chain-broken block).
    records = expected[0]
    for cause in ("first-seen", "evicted", "partial-block"):
        assert any(cause in r["gpu_miss"] for r in records), cause
    if cpu_blocks:
        assert any(e["tier"] == "cpu" for r in records for e in r["evicted_misses"])
        for cause in ("first-seen", "evicted", "partial-chunk"):
            assert any(cause in r["computed"] for r in records), cause


def test_the_kernel_refuses_a_replay_whose_figures_it_does_not_reproduce(monkeypatch: pytest.MonkeyPatch) -> None:
    from array import array

    from sim.explain.columns import explain_trace

    monkeypatch.setenv(compiled.ENGINE_ENV, "compiled")
    trace = open_trace("mooncake-synthetic")
    tiers = ReplayTiers(400, 4000)
    outcome = run_replay(trace, tiers)
    outputs = replay_outputs(trace)
    assert explain_trace(trace, tiers, outcome.gpu_hit, outcome.computed, outputs) is not None
    # One request computed one token more than the kernel's run says: the replay followed other rules.
    computed = array("q", outcome.computed)
    computed[7] += 1
    assert explain_trace(trace, tiers, outcome.gpu_hit, computed, outputs) is None


def decode_requests(trace: Trace, chunk_blocks: int) -> list[Any]:
    """The trace's requests with vLLM's decode: every generated token but the last gets KV, the full blocks past
    the prompt's cached under negative keys of their own (as ``sim.workload`` grows a scenario's requests)."""
    block, generated = trace.block_tokens, 0
    requests = trace_requests(trace, chunk_blocks)
    if grows_kv(trace):
        return requests  # the replay's own requests have it already
    for seq, req in enumerate(requests):
        out = trace.output_tokens[seq]
        if out > 1:
            kv_tokens = req.prompt_tokens + out - 1
            more = kv_tokens // block - len(req.block_keys)
            req.block_keys = req.block_keys + list(range(-1 - generated, -1 - generated - more, -1))
            generated += more
            req.alloc_blocks = max(req.alloc_blocks, -(-kv_tokens // block))
    return requests


@pytest.mark.parametrize("backend", ["brief", "lmcache"])
def test_the_kernel_grows_kv_by_decode_as_the_engine_does(backend: str) -> None:
    from sim.explain.columns import explain_trace

    trace = open_trace("mooncake-synthetic")
    tiers = ReplayTiers(400, 4000, 1, backend)
    requests = decode_requests(trace, 1)
    prompt_blocks = sum(r.prompt_tokens // trace.block_tokens for r in requests)
    assert sum(len(r.block_keys) for r in requests) > prompt_blocks  # decode fills blocks of its own
    engine = Engine(tiers.run, tiers.spec(trace.block_tokens), default_costs())
    attach(engine)
    records = engine.run_all(requests)
    gpu_hit, computed = array("q", (r.gpu_hit_tokens for r in records)), array("q", (r.computed_tokens for r in records))
    # Without decode the kernel's run parts from the engine's: it refuses; with it, it gives the same causes.
    assert explain_trace(trace, tiers, gpu_hit, computed) is None
    columns = explain_trace(trace, tiers, gpu_hit, computed, trace.output_tokens)
    assert columns is not None
    for i, rec in enumerate(records):
        done = columns[i]
        assert (done.gpu_miss, done.computed, done.evicted_misses, done.infinite_hit_tokens) == (
            rec.gpu_miss, rec.computed, rec.evicted_misses, rec.infinite_hit_tokens), i
