"""The compiled attribution (the replay kernel compiled with sim.engine.explain_kernel's step) gives exactly what the Python
observer gives: every request's ``gpu_miss``, ``computed``, evicted detail and infinite-cache bound, and the totals,
on random traces and the Mooncake sample, under either CPU backend and with vLLM's decode; and explaining changes
none of the replay's own figures, in slices of any size."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.costs.model import default_costs
from sim.engine import compiled
from sim.engine.loop import Engine
from sim.explain import attach
from sim.explain.summary import totals
from sim.simulation.replay import ReplayTiers, run_replay, trace_requests
from sim.traces.reader import Trace, open_trace
from tests.sim.engine.test_compiled import traces

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


def grows_kv(trace: Trace) -> bool:
    """Whether the replay's requests (``trace_requests``) grow their KV by decode past their prompt's blocks."""
    return any(len(r.block_keys) > r.prompt_tokens // trace.block_tokens for r in trace_requests(trace, 1))


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


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    trace=traces(), gpu_extra=st.integers(0, 30), cpu=st.one_of(st.none(), st.integers(1, 40)), chunk_blocks=st.integers(1, 3),
    backend=st.sampled_from(["lmcache", "brief"]),
)
def test_compiled_attribution_equals_the_observers_on_random_traces(
    trace: Trace, gpu_extra: int, cpu: int | None, chunk_blocks: int, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu_blocks = None if cpu is None else max(cpu, chunk_blocks)
    tiers = ReplayTiers(gpu_blocks_needed(trace) + gpu_extra, cpu_blocks, chunk_blocks, backend)  # type: ignore[arg-type]
    assert compiled_explained(trace, tiers, monkeypatch) == python_explained(trace, tiers)


@pytest.mark.parametrize(
    ("gpu_blocks", "cpu_blocks", "chunk_blocks", "backend"),
    [(400, None, 1, "lmcache"), (400, 4000, 1, "lmcache"), (1000, 6000, 4, "lmcache"), (400, 4000, 1, "brief")],
)
def test_compiled_attribution_equals_the_observers_on_the_mooncake_sample(
    gpu_blocks: int, cpu_blocks: int | None, chunk_blocks: int, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = open_trace("mooncake-synthetic")
    assert grows_kv(trace)  # decode fills blocks of its own: the kernel grows KV as the engine does
    tiers = ReplayTiers(gpu_blocks, cpu_blocks, chunk_blocks, backend)  # type: ignore[arg-type]
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


@pytest.mark.parametrize("tiers", [ReplayTiers(400), ReplayTiers(400, 4000, 1, "lmcache"), ReplayTiers(400, 900, 2, "brief")])
def test_explaining_changes_no_figure_and_slices_change_no_cause(tiers: ReplayTiers, monkeypatch: pytest.MonkeyPatch) -> None:
    # The replay compiled with attribution is the plain replay's loop: its records (hits, computed, stored,
    # evictions, TTFT) are the plain replay's. Run in slices of one request, of a few, of a few thousand
    # references and of the whole sample, the attribution, whose ``by`` rows grow across slices, is the same.
    from sim.engine import explain_kernel

    trace = open_trace("mooncake-synthetic")
    monkeypatch.setenv(compiled.ENGINE_ENV, "compiled")
    plain = [r.to_dict() for r in run_replay(trace, tiers).records()]
    assert "gpu_miss" not in plain[0]
    expected = None
    for slice_refs in (1, 7, 4096, compiled.SLICE_REFS):
        monkeypatch.setattr(compiled, "SLICE_REFS", slice_refs)
        outcome = run_replay(trace, tiers, explain=True)
        assert outcome.engine == "compiled"
        records = [r.to_dict() for r in outcome.records()]
        assert [{k: r[k] for k in p} for r, p in zip(records, plain, strict=True)] == plain
        assert outcome.explained.by.shape[0] > explain_kernel.BY_ROWS  # type: ignore[union-attr]  # it grew
        if expected is None:
            expected = records
        assert records == expected, slice_refs


@settings(max_examples=300, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(0, 12), st.integers(1, 2000)), max_size=30), used=st.integers(0, 5))
def test_by_rows_are_the_runs_summed_per_request_in_request_order(runs: list[tuple[int, int]], used: int) -> None:
    # The replay kernel writes an evicted span's runs to by in prefix order, no two adjacent with the same
    # evicting request; whatever their order (ascending, descending: no sort; any other: sorted), in_seq_order
    # makes them sorted(by.items()) of the observer's by, the tokens summed per request: derived here with a dict.
    import numpy as np

    from sim.engine import explain_kernel

    runs = [run for i, run in enumerate(runs) if i == 0 or run[0] != runs[i - 1][0]]
    summed: dict[int, int] = {}
    for seq, tokens in runs:
        summed[seq] = summed.get(seq, 0) + tokens
    by = explain_kernel.grown(np.full((1, 2), -7, np.int64), 1, used + len(runs))
    assert by.shape[0] >= used + len(runs) and by[0].tolist() == [-7, -7]  # room made, the rows before kept
    by[used : used + len(runs)] = runs or np.empty((0, 2), np.int64)
    before = by[:used].tolist()
    end = explain_kernel.in_seq_order(by, used, used + len(runs))
    assert by[used:end].tolist() == [[s, t] for s, t in sorted(summed.items())]
    assert by[:used].tolist() == before
