"""``replay --json``'s request rows written from the columns are ``json.dumps`` of the rows, character for character."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.engine import compiled
from sim.explain.columns import ExplainedColumns
from sim.simulation.replay import ReplayTiers, run_replay
from sim.traces.reader import Trace, open_trace
from tests.sim.engine.test_compiled import longest_kv_blocks, traces


def texts_and_rows(trace: Trace, tiers: ReplayTiers, explain: bool) -> tuple[list[str], list[str]]:
    outcome = run_replay(trace, tiers, explain=explain)
    return list(outcome.request_texts()), [json.dumps(r) for r in outcome.request_rows()]


@pytest.mark.parametrize(("cpu_blocks", "chunk_blocks"), [(None, 1), (4000, 1), (6000, 4)])
@pytest.mark.parametrize("explain", [False, True])
def test_the_samples_rows_are_written_as_json_dumps_writes_them(
    cpu_blocks: int | None, chunk_blocks: int, explain: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At 400 GPU blocks (and 4,000 or 6,000 CPU blocks) the sample evicts from both tiers, so the evicted lists,
    # the evicted misses and their ``by`` lists are filled; explained, the attribution is the compiled one.
    monkeypatch.setenv(compiled.ENGINE_ENV, "compiled")
    outcome = run_replay(open_trace("mooncake-synthetic"), ReplayTiers(400, cpu_blocks, chunk_blocks), explain=explain)
    assert isinstance(outcome.explained, ExplainedColumns) == explain
    rows = list(outcome.request_rows())
    assert any(r["evicted"] for r in rows) and any(r["tier_hits"] for r in rows) == bool(cpu_blocks)
    if explain:
        assert any(len(e["by"]) > 1 for r in rows for e in r["evicted_misses"])
        assert any(e["tier"] == "cpu" for r in rows for e in r["evicted_misses"]) == bool(cpu_blocks)
    assert list(outcome.request_texts()) == [json.dumps(r) for r in rows]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    trace=traces(), gpu_extra=st.integers(0, 30), cpu=st.one_of(st.none(), st.integers(1, 40)), chunk_blocks=st.integers(1, 3),
    engine=st.sampled_from(["compiled", "python"]), explain=st.booleans(),
)
def test_random_traces_rows_are_written_as_json_dumps_writes_them(
    trace: Trace, gpu_extra: int, cpu: int | None, chunk_blocks: int, engine: str, explain: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both engines, explained or not: the Python engine's explained records go through json.dumps, every other
    # outcome is formatted from its columns; either way the text is the row's json.dumps.
    monkeypatch.setenv(compiled.ENGINE_ENV, engine)
    cpu_blocks = None if cpu is None else max(cpu, chunk_blocks)
    texts, rows = texts_and_rows(trace, ReplayTiers(longest_kv_blocks(trace) + gpu_extra, cpu_blocks, chunk_blocks), explain)
    assert texts == rows
