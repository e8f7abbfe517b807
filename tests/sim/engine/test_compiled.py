"""The compiled loops (numba) give exactly what the pure-Python reference gives: curves, and replay records request by request."""

from __future__ import annotations

import json
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.analysis.stack_distance import python_stack_profile, stack_profile
from sim.blocks.request import Units
from sim.costs.model import default_costs
from sim.engine import compiled
from sim.engine.loop import Engine, TierSpec
from sim.simulation.replay import ReplayOutcome, ReplayTiers, run_replay, trace_requests
from sim.traces.reader import Trace, open_trace, parse_trace

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


@pytest.fixture
def force(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def set_engine(choice: str) -> None:
        monkeypatch.setenv(compiled.ENGINE_ENV, choice)

    return set_engine


def python_records(trace: Trace, tiers: ReplayTiers) -> list[dict[str, object]]:
    """The reference: the Python engine, request by request, as ``to_dict`` gives them."""
    engine = Engine(tiers.run, tiers.spec(trace.block_tokens), default_costs())
    return [r.to_dict() for r in engine.run_all(trace_requests(trace, tiers.chunk_blocks))]


def compiled_records(trace: Trace, tiers: ReplayTiers, force) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    force("compiled")
    outcome = run_replay(trace, tiers)
    assert outcome.engine == "compiled"
    return [r.to_dict() for r in outcome.records()]


# -- random workloads ---------------------------------------------------------------------------------
#
# A request continues an earlier request's prefix (some of its blocks, so that prefixes are shared and
# diverge) with fresh blocks; ids are never reused across different prefixes, as in Mooncake's traces.
# Prompt lengths are random, so some end exactly on a block boundary: vLLM then recomputes the last
# block, which the pool holds twice (the copies case).

BLOCK = 4


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    count = draw(st.integers(1, 40))
    prompts: list[list[int]] = []
    lines = []
    fresh = 0
    for _ in range(count):
        prefix: list[int] = []
        if prompts and draw(st.booleans()):
            parent = prompts[draw(st.integers(0, len(prompts) - 1))]
            prefix = parent[: draw(st.integers(0, len(parent)))]
        extra = draw(st.integers(0 if prefix else 1, 8))
        ids = prefix + list(range(fresh, fresh + extra))
        fresh += extra
        prompts.append(ids)
        # Any length whose blocks are exactly these ids: from 4 * (len - 1) + 1 to 4 * len tokens.
        tokens = draw(st.integers(BLOCK * (len(ids) - 1) + 1, BLOCK * len(ids)))
        # Decode: 0 or 1 generate no KV; more fill the partial block and whole blocks after it.
        output = draw(st.sampled_from([0, 1, 2, 3, 4, 5, 9, 14]))
        lines.append(json.dumps({"timestamp": len(lines), "input_length": tokens, "output_length": output, "hash_ids": ids}))
    return parse_trace("\n".join(lines).encode(), BLOCK)


def longest_kv_blocks(trace: Trace) -> int:
    """The most blocks one request holds, its generated tokens' included (the pool must hold them)."""
    return max(max(b, -(-(n + o - 1) // BLOCK)) for b, n, o in zip(trace.block_counts(), trace.input_tokens, trace.output_tokens))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    trace=traces(), gpu_extra=st.integers(0, 30), cpu=st.one_of(st.none(), st.integers(1, 40)), chunk_blocks=st.integers(1, 3),
    backend=st.sampled_from(["lmcache", "brief"]),
)
def test_replay_records_equal_the_python_engines_on_random_traces(
    trace: Trace, gpu_extra: int, cpu: int | None, chunk_blocks: int, backend: str, force  # type: ignore[no-untyped-def]
) -> None:
    cpu_blocks = None if cpu is None else max(cpu, chunk_blocks)
    tiers = ReplayTiers(longest_kv_blocks(trace) + gpu_extra, cpu_blocks, chunk_blocks, backend)  # type: ignore[arg-type]
    assert compiled_records(trace, tiers, force) == python_records(trace, tiers)


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_lmcache_reserves_before_it_stores_where_the_brief_evicts(engine: str, force) -> None:  # type: ignore[no-untyped-def]
    # One request of two full 4-token blocks (ids 0 and 1), one-block chunks, a CPU of one chunk.
    # LMCache (ChunkStore.store_reserving): chunk 0 reserves the one slot; chunk 1 finds the tier full of
    # reservations with nothing stored to evict, so the store gives up: 4 tokens stored, nothing evicted.
    # The brief (put_many): chunk 0 is put, chunk 1 evicts it: 8 tokens written, chunk 0 (tokens 0-4) evicted.
    trace = parse_trace(json.dumps({"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [0, 1]}).encode(), BLOCK)
    force(engine)
    lm = [r.to_dict() for r in run_replay(trace, ReplayTiers(2, 1, 1, "lmcache")).records()]
    brief = [r.to_dict() for r in run_replay(trace, ReplayTiers(2, 1, 1, "brief")).records()]
    assert (lm[0]["stored_tokens"], lm[0]["evicted"]) == (4, [])
    assert brief[0]["stored_tokens"] == 8
    assert brief[0]["evicted"] == [{"tier": "cpu", "doc": -1, "tokens": 4, "start": 0, "end": 4, "part": "head"}]


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_lmcache_reserves_for_a_chunk_it_holds_and_that_can_evict_the_chunk_itself(engine: str, force) -> None:  # type: ignore[no-untyped-def]
    # One-block chunks of 4 tokens, a CPU of two chunks. r0 [10, 11] stores both: the tier holds 10, 11 (front first).
    # r1 [20, 11]: its lookup finds nothing (20 is the first chunk and absent), so LMCache's store covers both chunks.
    # Reserving 20 evicts the front, 10; reserving 11, although held, finds the tier full again (11 stored + 20
    # reserved) and evicts the front, which is 11 itself. Then 20 is put, and 11, no longer held, is put again.
    # So r1 evicts 8 tokens, chunks 0 and 1 (tokens 0-8), and stores 8. Reserving only for chunks not held
    # would evict 10 alone.
    lines = [
        {"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [10, 11]},
        {"timestamp": 1, "input_length": 8, "output_length": 1, "hash_ids": [20, 11]},
    ]
    trace = parse_trace("\n".join(json.dumps(line) for line in lines).encode(), BLOCK)
    force(engine)
    r1 = list(run_replay(trace, ReplayTiers(2, 2, 1, "lmcache")).records())[1].to_dict()
    assert r1["stored_tokens"] == 8
    assert [e for e in r1["evicted"] if e["tier"] == "cpu"] == [
        {"tier": "cpu", "doc": -1, "tokens": 8, "start": 0, "end": 8, "part": "whole"}
    ]


@pytest.mark.parametrize("backend", ["lmcache", "brief"])
@pytest.mark.parametrize(("gpu_blocks", "cpu_blocks", "chunk_blocks"), [(400, None, 1), (2000, None, 1), (400, 4000, 1), (2000, 20000, 1), (1000, 6000, 4)])
def test_replay_records_equal_the_python_engines_on_the_mooncake_sample(
    gpu_blocks: int, cpu_blocks: int | None, chunk_blocks: int, backend: str, force  # type: ignore[no-untyped-def]
) -> None:
    trace = open_trace("mooncake-synthetic")
    tiers = ReplayTiers(gpu_blocks, cpu_blocks, chunk_blocks, backend)  # type: ignore[arg-type]
    expected = python_records(trace, tiers)
    assert compiled_records(trace, tiers, force) == expected
    # The comparison means something: the tiers are small enough to evict.
    assert any(e["tier"] == "gpu" for r in expected for e in r["evicted"])  # type: ignore[union-attr]
    if cpu_blocks:
        assert any(e["tier"] == "cpu" for r in expected for e in r["evicted"])  # type: ignore[union-attr]


def test_outcome_from_python_records_round_trips_them(force) -> None:  # type: ignore[no-untyped-def]
    # The columns the JSON is written from hold everything a record says.
    force("python")
    trace = open_trace("mooncake-synthetic")
    tiers = ReplayTiers(400, 4000)
    outcome = run_replay(trace, tiers)
    assert outcome.engine == "python"
    assert [r.to_dict() for r in outcome.records()] == python_records(trace, tiers)


# -- the one-pass curve ------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=st.lists(st.integers(0, 2**63 - 1) | st.integers(0, 30), max_size=300))
def test_stack_profile_compiled_equals_python(stream: list[int], force) -> None:  # type: ignore[no-untyped-def]
    force("compiled")
    assert stack_profile(array("q", stream)) == python_stack_profile(stream)


def test_stack_profile_of_the_sample_compiled_equals_python(force) -> None:  # type: ignore[no-untyped-def]
    force("compiled")
    stream = open_trace("mooncake-synthetic").block_stream()
    assert stack_profile(stream) == python_stack_profile(stream.tolist())


# -- when the compiled path runs ---------------------------------------------------------------------------


def test_auto_compiles_only_large_work(force) -> None:  # type: ignore[no-untyped-def]
    force("auto")
    assert not compiled.worth_it(compiled.MIN_COMPILED_REFS - 1)
    assert compiled.worth_it(compiled.MIN_COMPILED_REFS)
    force("python")
    assert not compiled.worth_it(10**9)


def test_a_bad_engine_setting_is_named(force) -> None:  # type: ignore[no-untyped-def]
    force("fast")
    with pytest.raises(ValueError, match="KVSCOPE_ENGINE must be one of python, compiled, auto"):
        compiled.worth_it(1)


UNITS = Units(16, 256)


@pytest.mark.parametrize(
    ("spec", "reproduced"),
    [
        (ReplayTiers(100).spec(16), True),
        (ReplayTiers(100, 1000, 4).spec(16), True),
        (TierSpec(UNITS, 1600, free_order="vllm-legacy"), False),
        (TierSpec(UNITS, 1600, gpu_policy="fifo"), False),
        (TierSpec(UNITS, 1600, reserve_null_block=False), False),
        (TierSpec(UNITS, 1600, cpu_tokens=16_000, cpu_policy="mru"), False),
        (TierSpec(UNITS, 1600, cpu_tokens=16_000, disk_tokens=160_000), False),
        (TierSpec(Units(16, 24), 1600, cpu_tokens=16_000), False),
    ],
)
def test_the_kernel_runs_only_configurations_it_reproduces(spec: TierSpec, reproduced: bool) -> None:
    assert compiled.kernel_reproduces(spec) is reproduced


def test_a_tier_spec_with_fields_the_kernel_does_not_know_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tiers that gain a field (a backend, a tier list) are not what the kernel was written for.
    monkeypatch.setattr(compiled, "KNOWN_SPEC_FIELDS", compiled.KNOWN_SPEC_FIELDS - {"disk_policy"})
    assert not compiled.kernel_reproduces(ReplayTiers(100).spec(16))


def test_outcome_columns_come_from_the_kernel_when_forced(force) -> None:  # type: ignore[no-untyped-def]
    force("compiled")
    outcome = run_replay(open_trace("mooncake-synthetic"), ReplayTiers(2000))
    assert isinstance(outcome, ReplayOutcome) and outcome.engine == "compiled"


def test_auto_replays_a_large_trace_compiled_with_the_python_engines_figures(force) -> None:  # type: ignore[no-untyped-def]
    # The sample four times over: 487,508 block references, past MIN_COMPILED_REFS, so "auto" compiles.
    from sim.traces.reader import bundled_trace_path

    trace = parse_trace(bundled_trace_path("mooncake-synthetic").read_bytes() * 4)
    assert trace.total_blocks >= compiled.MIN_COMPILED_REFS
    tiers = ReplayTiers(2000, 20000)
    force("auto")
    fast = run_replay(trace, tiers)
    # The summary's distinct count comes from the compiled replay's dense ids: it must be the true count.
    assert trace.summary()["distinct_blocks"] == len(set(trace.hash_ids)) == 43_924
    force("python")
    slow = run_replay(trace, tiers)
    assert (fast.engine, slow.engine) == ("compiled", "python")
    assert fast.tier_hits() == slow.tier_hits()
    assert fast.totals() == slow.totals()
    assert fast.ttft_ms == slow.ttft_ms
    assert fast.gpu_ev == slow.gpu_ev and fast.cpu_ev == slow.cpu_ev
