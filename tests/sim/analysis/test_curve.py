"""One-pass LRU hit-ratio curves: golden streams, equality with direct simulation at every capacity, and libCacheSim."""

from __future__ import annotations

import json
import tempfile
from array import array
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cli import main
from bench import _libcachesim
from sim.analysis.curve import lru_curve, scenario_stream, trace_stream
from sim.analysis.stack_distance import (
    curve_capacities,
    lru_hits,
    python_stack_profile,
    run_stack_profile,
    stack_profile,
)
from sim.traces.reader import open_trace
from sim.workloads.presets import preset_fields
from sim.workloads.scenario import Scenario


def naive_lru_hits(stream: list[int], capacity: int) -> int:
    """The textbook LRU on a Python list (most recent last): the test's own oracle."""
    cache: list[int] = []
    hits = 0
    for key in stream:
        if key in cache:
            hits += 1
            cache.remove(key)
        elif len(cache) == capacity:
            if capacity == 0:
                continue
            cache.pop(0)
        cache.append(key)
    return hits


def test_cyclic_scan_gets_nothing_until_everything_fits() -> None:
    # a b c a b c: each re-reference has 2 other keys since its last use (depth 3).
    stream = [1, 2, 3, 1, 2, 3]
    profile = stack_profile(stream)
    assert [profile.hits(c) for c in range(5)] == [0, 0, 0, 3, 3]
    assert [lru_hits(stream, c) for c in range(5)] == [0, 0, 0, 3, 3]


def test_depths_of_a_mixed_stream() -> None:
    # a b a c b a: a@2 has depth 2 (b between); b@4 depth 3 (a, c); a@5 depth 3 (c, b); c and the first a, b are cold.
    stream = [1, 2, 1, 3, 2, 1]
    profile = stack_profile(stream)
    assert (profile.references, profile.distinct) == (6, 3)
    assert [profile.hits(c) for c in range(5)] == [0, 0, 1, 3, 3]
    assert [lru_hits(stream, c) for c in range(5)] == [0, 0, 1, 3, 3]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=80))
def test_profile_equals_direct_simulation_at_every_capacity(stream: list[int]) -> None:
    profile = stack_profile(stream)
    for capacity in range(0, len(set(stream)) + 2):
        expected = naive_lru_hits(stream, capacity)
        assert profile.hits(capacity) == expected == lru_hits(stream, capacity)


def test_capacities_spread_up_to_the_distinct_blocks() -> None:
    assert curve_capacities(1000, 4) == [250, 500, 750, 1000]
    assert curve_capacities(3, 10) == [1, 2, 3]  # fewer points than asked when they coincide


def test_bundled_trace_curve_equals_direct_simulation_at_every_reported_capacity() -> None:
    stream = trace_stream(open_trace("mooncake-synthetic"))
    curve = lru_curve(stream, points=100)
    assert (curve["references"], curve["distinct_blocks"]) == (121_877, 43_924)
    assert len(curve["points"]) == 100 and curve["points"][-1]["capacity_blocks"] == 43_924
    for point in curve["points"]:
        hits = lru_hits(stream, point["capacity_blocks"])
        assert point["hit_blocks"] == hits
        assert point["hit_ratio"] == hits / 121_877
    # Holding every distinct block, only first references miss.
    assert curve["points"][-1]["hit_blocks"] == 121_877 - 43_924


def test_seed_lab_stream_shows_the_cyclic_cliff() -> None:
    # seed-lab: 10 docs, 5,024-token prompts = 314 full 16-token blocks: 313 of the document, the 314th mixes
    # the document's last 3 tokens with the pass's question (new every pass). Passes: forward, forward, reverse.
    stream = scenario_stream(Scenario(**preset_fields("seed-lab")))
    assert (len(stream), len(set(stream))) == (30 * 314, 10 * 313 + 30)
    profile = stack_profile(stream)
    # Pass 2 re-reads block i of doc d after 313 + 9 * 314 = 3,139 other blocks: depth 3,140 for all of them.
    # Pass 3 (reverse) reaches doc 9-j after j docs of 313 re-read blocks plus 2j new question blocks:
    # depth 314 + 315j. So below 3,140 only pass 3 hits: 313 blocks per doc with 314 + 315j <= C.
    for capacity in (313, 314, 628, 629, 3139):
        docs = sum(1 for j in range(10) if 314 + 315 * j <= capacity)
        assert profile.hits(capacity) == 313 * docs, capacity
    assert profile.hits(3139) == 313 * 9  # j = 9 needs 3,149
    assert profile.hits(3140) == 3130 + 313 * 9  # pass 2 now hits every document block
    assert profile.hits(3149) == 3130 + 3130


def test_curve_cli_json_is_the_documented_list() -> None:
    result = CliRunner().invoke(main, ["curve", "mooncake-synthetic", "--points", "4", "--json"])
    assert result.exit_code == 0, result.output
    points = json.loads(result.output)
    # 43,924 distinct blocks in 4 steps: 10,981, 21,962, 32,943, 43,924.
    assert [p["capacity_blocks"] for p in points] == [10_981, 21_962, 32_943, 43_924]
    stream = trace_stream(open_trace("mooncake-synthetic"))
    assert points[1]["hit_ratio"] == lru_hits(stream, 21_962) / len(stream)


def test_curve_cli_without_a_trace_uses_the_scenario() -> None:
    result = CliRunner().invoke(main, ["curve", "--docs", "2", "--doc-tokens", "32", "--question-tokens", "0", "--passes",
                                       "forward,forward", "--points", "2", "--json"])
    assert result.exit_code == 0, result.output
    # Two 2-block documents read twice: 4 distinct blocks; every re-reference has depth 4.
    assert json.loads(result.output) == [
        {"capacity_blocks": 2, "hit_ratio": 0.0, "hit_blocks": 0},
        {"capacity_blocks": 4, "hit_ratio": 0.5, "hit_blocks": 4},
    ]


def test_curve_cli_rejects_bad_points() -> None:
    result = CliRunner().invoke(main, ["curve", "mooncake-synthetic", "--points", "0"])
    assert result.exit_code == 2 and "--points" in result.output


@pytest.mark.skipif(_libcachesim.available() is None, reason="libcachesim is not installed (pip install 'kvscope[bench]')")
def test_curve_equals_libcachesim_lru_on_the_flattened_trace() -> None:
    stream = trace_stream(open_trace("mooncake-synthetic"))
    capacities = [1, 10, 100, 1000, 4392, 10_000, 21_962, 43_923, 43_924, 50_000]
    profile = stack_profile(stream)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flat.oracleGeneral"
        _libcachesim.write_oracle_general(stream, path)
        theirs = _libcachesim.lru_hit_ratios(path, capacities, profile.distinct)
    for capacity, ratio in zip(capacities, theirs):
        assert abs(profile.hit_ratio(capacity) - ratio) <= 1e-6, capacity


@st.composite
def rereading_streams(draw: st.DrawFn) -> list[int]:
    """Streams that re-read earlier stretches in order, as requests re-read prefixes: runs of the batched loop."""
    stream = draw(st.lists(st.integers(0, 40), max_size=60))
    for _ in range(draw(st.integers(0, 6))):
        if stream and draw(st.booleans()):
            lo = draw(st.integers(0, len(stream) - 1))
            stream += stream[lo : draw(st.integers(lo, len(stream)))]
        else:
            stream += draw(st.lists(st.integers(0, 60), max_size=20))
    return stream


@settings(max_examples=300, deadline=None)
@given(stream=rereading_streams())
def test_the_run_batched_loop_equals_the_reference_loop(stream: list[int]) -> None:
    assert run_stack_profile(stream) == python_stack_profile(stream)


def test_the_run_batched_loop_equals_the_reference_loop_on_the_sample() -> None:
    stream = open_trace("mooncake-synthetic").block_stream()
    assert run_stack_profile(stream) == python_stack_profile(stream)


# The run loop indexes a list by id when the stream is a 64-bit array of ids from 0 up and not far past its length,
# and renumbers any other stream's keys first (a list of keys, an array with a negative or a huge id): each way
# must count what the reference loop counts, one reference at a time, on the keys as given.
ID_SHIFTS = [0, 7, -5, 10**12, 2**62]


@settings(max_examples=300, deadline=None)
@given(stream=rereading_streams(), shift=st.sampled_from(ID_SHIFTS))
def test_the_run_loop_on_arrays_of_any_ids_equals_the_reference_loop(stream: list[int], shift: int) -> None:
    keys = [k + shift for k in stream]
    assert run_stack_profile(array("q", keys)) == python_stack_profile(keys)


def test_ids_growing_past_the_first_guess_and_past_the_list_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0 .. 9 then 1,000 .. 1,009 read three times: the list of last positions starts at 61 entries (the stream's
    # length + 1) and grows to hold id 1,009, within the bound of 4 x 60 + 1,024 = 1,264 entries.
    from sim.analysis import stack_distance

    renumbered: list[int] = []
    renumber = stack_distance._dense_ids
    monkeypatch.setattr(stack_distance, "_dense_ids", lambda s: renumbered.append(len(s)) or renumber(s))
    stream = (list(range(10)) + list(range(1000, 1010))) * 3
    assert run_stack_profile(array("q", stream)) == python_stack_profile(stream)
    assert renumbered == []
    # With id 10**6 in the middle (past 4 x 121 + 1,024 = 1,508) the loop starts again on the keys renumbered.
    far = stream + [10**6] + stream
    assert run_stack_profile(array("q", far)) == python_stack_profile(far)
    assert renumbered == [121]


def test_the_sample_read_as_a_list_and_as_an_array_gives_the_reference_curve() -> None:
    stream = open_trace("mooncake-synthetic").block_stream()
    reference = python_stack_profile(stream.tolist())
    assert run_stack_profile(stream) == reference == run_stack_profile(stream.tolist())
