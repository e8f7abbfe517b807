"""Trace replay: golden traces through the GPU pool and the CPU tier, per-tier block counts, and the CLI contract."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from sim.simulation.replay import ReplayError, ReplayTiers, replay
from sim.tiers.offload import OffloadTier
from sim.traces.reader import Trace, open_trace, parse_trace


def trace_of(*requests: tuple[int, list[int]], block_tokens: int = 4) -> Trace:
    lines = [
        json.dumps({"timestamp": i, "input_length": n, "output_length": 1, "hash_ids": ids})
        for i, (n, ids) in enumerate(requests)
    ]
    return parse_trace("\n".join(lines).encode(), block_tokens)


def tier(result: dict, name: str) -> dict:
    return next(t for t in result["tiers"] if t["name"] == name)


def test_gpu_prefix_hits_last_token_rule_and_eviction() -> None:
    # 4-token blocks, 3 usable GPU blocks b1..b3 (the null block is extra). Free queue front first.
    trace = trace_of(
        (8, [1, 2]),  # r0: misses both; takes b1,b2; freed tail first: queue [b3, b2(2), b1(1)]
        (12, [1, 2, 3]),  # r1: at most (12-1)//4 = 2 blocks may hit: 1 and 2 (8 tokens); 3 goes into b3
        (8, [1, 2]),  # r2: all cached, but at most (8-1)//4 = 1 block may hit (4 tokens); the recomputed
        #               block is popped from the front, b3, evicting block 3 (4 tokens)
        (6, [1, 9]),  # r3: one full block (1) hits, max (6-1)//4 = 1; the partial block 9 is never cached
    )
    result = replay(trace, ReplayTiers(gpu_blocks=3))
    reqs = result["requests"]
    assert [r["gpu_hit_tokens"] for r in reqs] == [0, 8, 4, 4]
    assert [r["computed_tokens"] for r in reqs] == [8, 4, 4, 2]
    assert [r["cpu_hit_tokens"] for r in reqs] == [0, 0, 0, 0]
    assert [e["tokens"] for e in reqs[2]["evicted"]] == [4]
    assert reqs[2]["evicted"][0]["tier"] == "gpu" and reqs[2]["evicted"][0]["doc"] == -1
    assert all(not r["evicted"] for i, r in enumerate(reqs) if i != 2)
    assert [r["timestamp_ms"] for r in reqs] == [0, 1, 2, 3]
    # Full blocks looked up: 2 + 3 + 2 + 1 = 8; hit: 0 + 2 + 1 + 1 = 4.
    assert result["run"] == "gpu"
    assert result["tiers"] == [{"name": "gpu", "lookup_blocks": 8, "hit_blocks": 4, "hit_ratio": 0.5, "capacity_blocks": 3}]


def test_decode_fills_blocks_that_are_cached_and_evicted_like_the_prompts() -> None:
    # 4-token blocks, 3 usable GPU blocks b1..b3. r0: 6 prompt tokens (ids 1 and a partial 2), 7 output tokens:
    # decode gives KV to 6 of them (the last sampled token has none), 12 tokens = 3 full blocks: key 1, then
    # two generated blocks (positions 1 and 2) that no later prompt holds. All three are hashed, so all are
    # freed to the back, tail first: queue [b3 (pos 2), b2 (pos 1), b1 (key 1)].
    # r1: 8 tokens [1, 5]: at most (8-1)//4 = 1 block hits (key 1, b1); its second block pops b3 from the
    # front, evicting the generated block at tokens 8-12. Without decode r0's partial block would have gone
    # to the front unhashed and been reused without an eviction.
    lines = [
        {"timestamp": 0, "input_length": 6, "output_length": 7, "hash_ids": [1, 2]},
        {"timestamp": 1, "input_length": 8, "output_length": 1, "hash_ids": [1, 5]},
    ]
    trace = parse_trace("\n".join(json.dumps(line) for line in lines).encode(), 4)
    reqs = replay(trace, ReplayTiers(gpu_blocks=3))["requests"]
    assert [r["gpu_hit_tokens"] for r in reqs] == [0, 4]
    assert reqs[0]["evicted"] == []
    assert [(e["tier"], e["tokens"], e["start"], e["end"]) for e in reqs[1]["evicted"]] == [("gpu", 4, 8, 12)]
    # The pool must hold a request's generated blocks too: r0 needs 3, though its prompt has 2 ids.
    with pytest.raises(ReplayError, match="at least 3 blocks"):
        replay(trace, ReplayTiers(gpu_blocks=2))


def test_cpu_tier_serves_what_the_gpu_evicted() -> None:
    trace = trace_of(
        (8, [1, 2]),  # A: computed, written through to CPU
        (12, [5, 6, 7]),  # B: needs all 3 GPU blocks, evicting A's
        (8, [1, 2]),  # A again: GPU misses; both chunks in CPU; 8 - 1 = 7 tokens loaded, 1 recomputed
    )
    result = replay(trace, ReplayTiers(gpu_blocks=3, cpu_blocks=100))
    reqs = result["requests"]
    assert [r["gpu_hit_tokens"] for r in reqs] == [0, 0, 0]
    assert [r["cpu_hit_tokens"] for r in reqs] == [0, 0, 7]
    assert reqs[2]["computed_tokens"] == 1
    assert reqs[2]["ttft_ms"] < reqs[0]["ttft_ms"]  # loading 7 tokens is cheaper than computing them
    # GPU: 2 + 3 + 2 full blocks looked up, none hit. CPU: asked for the same 7 (the GPU hit nothing);
    # A again loads both blocks (the second partly: vLLM recomputes its last token).
    assert tier(result, "gpu") == {"name": "gpu", "lookup_blocks": 7, "hit_blocks": 0, "hit_ratio": 0.0, "capacity_blocks": 3}
    assert tier(result, "cpu") == {"name": "cpu", "lookup_blocks": 7, "hit_blocks": 2, "hit_ratio": 2 / 7, "capacity_blocks": 100}


def test_cpu_is_asked_only_for_blocks_the_gpu_missed() -> None:
    # gpu_blocks=2 and one 2-block prompt read twice: the second read hits block 1 on the GPU (the last-token
    # rule stops it there); the CPU is asked for block 2 only and loads it (3 of its 4 tokens, the last recomputed).
    result = replay(trace_of((8, [1, 2]), (8, [1, 2])), ReplayTiers(gpu_blocks=2, cpu_blocks=10))
    second = result["requests"][1]
    assert (second["gpu_hit_tokens"], second["cpu_hit_tokens"], second["computed_tokens"]) == (4, 3, 1)
    assert tier(result, "cpu")["lookup_blocks"] == 2 + 1
    assert tier(result, "cpu")["hit_blocks"] == 1


def test_chunks_of_several_blocks_are_keyed_by_their_last_block() -> None:
    # 2-block chunks: a 3-block prompt has one full chunk (blocks 1,2, keyed 2); its third block is not stored.
    # After a 3-block prompt evicts it from the GPU, the first prompt loads the chunk (8 tokens) and
    # computes its last block.
    trace = trace_of((12, [1, 2, 3]), (12, [5, 6, 7]), (12, [1, 2, 3]))
    result = replay(trace, ReplayTiers(gpu_blocks=3, cpu_blocks=10, chunk_blocks=2))
    assert [r["cpu_hit_tokens"] for r in result["requests"]] == [0, 0, 8]


def test_timeline_windows_partition_the_requests() -> None:
    trace = trace_of(*[(8, [1, 2])] * 10)  # timestamps 0..9
    result = replay(trace, ReplayTiers(gpu_blocks=2), timeline_buckets=3)
    windows = result["timeline"]
    # Span 9 ms in 3 windows of 3 ms: [0,3) -> 0,1,2; [3,6) -> 3,4,5; [6,9] -> 6,7,8,9.
    assert [w["requests"] for w in windows] == [3, 3, 4]
    # The first read misses both blocks; every later one hits block 1 (the last-token rule keeps block 2 out).
    assert [w["tiers"][0]["hit_blocks"] for w in windows] == [2, 3, 4]
    assert sum(w["tiers"][0]["lookup_blocks"] for w in windows) == tier(result, "gpu")["lookup_blocks"] == 20


def test_tiers_too_small_for_the_trace_are_refused() -> None:
    trace = trace_of((8, [1, 2]), (12, [1, 2, 3]))
    with pytest.raises(ReplayError, match="at least 3 blocks") as info:
        replay(trace, ReplayTiers(gpu_blocks=2))
    assert info.value.field == "gpu_blocks"
    with pytest.raises(ReplayError) as info:
        replay(trace, ReplayTiers(gpu_blocks=3, cpu_blocks=1, chunk_blocks=2))
    assert info.value.field == "cpu_blocks"


def test_cli_json_equals_the_library_result_on_the_bundled_trace() -> None:
    result = CliRunner().invoke(main, ["replay", "mooncake-synthetic", "--gpu-blocks", "1000", "--cpu-blocks", "8000", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    expected = replay(open_trace("mooncake-synthetic"), ReplayTiers(1000, 8000))
    assert data["requests"] == json.loads(json.dumps(expected["requests"]))
    assert data["tiers"] == expected["tiers"]
    assert len(data["requests"]) == 3993
    first = data["requests"][0]
    assert set(first) >= {"seq", "pass", "order", "doc", "prompt_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens", "ttft_ms", "evicted"}
    assert (first["prompt_tokens"], first["gpu_hit_tokens"], first["computed_tokens"]) == (40_160, 0, 40_160)
    gpu, cpu = data["tiers"]
    # Every full block of every prompt is looked up on the GPU; the CPU is asked for the rest.
    assert gpu["lookup_blocks"] == sum(r["prompt_tokens"] // 512 for r in data["requests"])
    assert cpu["lookup_blocks"] == gpu["lookup_blocks"] - gpu["hit_blocks"]
    assert 0 < gpu["hit_ratio"] < 1 and 0 < cpu["hit_ratio"] < 1


def test_cli_refuses_a_gpu_smaller_than_the_longest_prompt() -> None:
    # The bundled trace's longest prompt is 191,378 tokens = ceil(191378 / 512) = 374 blocks.
    result = CliRunner().invoke(main, ["replay", "mooncake-synthetic", "--gpu-blocks", "373"])
    assert result.exit_code == 2
    assert "--gpu-blocks" in result.output and "at least 374 blocks" in result.output


def test_cli_table_names_each_tier() -> None:
    result = CliRunner().invoke(main, ["replay", "mooncake-synthetic", "--gpu-blocks", "400", "--cpu-blocks", "4000"])
    assert result.exit_code == 0, result.output
    rows = [ln.split()[0] for ln in result.output.splitlines() if ln.startswith(("gpu ", "cpu "))]
    assert rows == ["gpu", "cpu"]
    assert "TTFT ms: p50" in result.output


def test_json_is_written_one_request_at_a_time() -> None:
    # The streamed JSON parses to what replay() returns, and writing it holds no request's text or record beyond
    # the one being written: the sample written twice over (same blocks, twice the requests) costs at most a
    # sorted copy of the TTFTs more (for the exact p50 and p90: one float per request), far less than the
    # ~370 bytes of JSON per request. (The trace's summary, computed once per trace, is a pass over its ids.)
    import io
    import tracemalloc

    from sim.simulation.replay import run_replay, write_replay_json
    from sim.traces.reader import bundled_trace_path

    tiers = ReplayTiers(1000, 8000)
    data = bundled_trace_path("mooncake-synthetic").read_bytes()

    class Sink(io.StringIO):
        written = 0

        def write(self, s: str) -> int:
            self.written += len(s)
            return len(s)

    peaks = []
    for copies in (1, 2):
        outcome = run_replay(parse_trace(data * copies), tiers)
        outcome.trace.summary()
        sink = Sink()
        tracemalloc.start()
        try:
            write_replay_json(outcome, sink)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert sink.written > 2_000_000  # the text written twice over is megabytes
    per_request = (peaks[1] - peaks[0]) / 3993
    assert per_request < 48 < sink.written / (2 * 3993) / 5

    trace = open_trace("mooncake-synthetic")
    text = io.StringIO()
    write_replay_json(run_replay(trace, tiers), text)
    assert json.loads(text.getvalue()) == json.loads(json.dumps(replay(trace, tiers, explain=False)))
    text = io.StringIO()
    write_replay_json(run_replay(trace, tiers, explain=True), text)  # with each miss's cause too
    assert json.loads(text.getvalue()) == json.loads(json.dumps(replay(trace, tiers)))


def test_replay_under_lmcache_stores_what_the_gpu_had_and_the_cpu_lacked(tmp_path: Path) -> None:
    # 4-token blocks, one block per chunk; the GPU holds both prompts, the CPU one (2 blocks).
    # r0 stores blocks 1, 2 in the CPU; r1 stores 3, 4, evicting them. r2 (blocks 1, 2 again) hits
    # (8 - 1) // 4 = 1 block on the GPU. The brief writes through the chunk holding computed tokens
    # (block 2: 4 tokens); LMCache, finding its own first chunk missing, stores from there: blocks 1
    # and 2, 8 tokens (vllm_v1_adapter.py 193, 1174-1191; see tests/sim/tiers/test_lmcache_rules.py).
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(
        json.dumps({"timestamp": i, "input_length": 8, "output_length": 1, "hash_ids": ids})
        for i, ids in enumerate(([1, 2], [3, 4], [1, 2]))
    ))
    stored = {}
    for backend in ("brief", "lmcache"):
        result = CliRunner().invoke(
            main, ["replay", str(path), "--block-size", "4", "--gpu-blocks", "4", "--cpu-blocks", "2", "--cpu-backend", backend, "--json"]
        )
        assert result.exit_code == 0, result.output
        stored[backend] = [r["stored_tokens"] for r in json.loads(result.output)["requests"]]
    assert stored == {"brief": [8, 8, 4], "lmcache": [8, 8, 8]}


@pytest.mark.parametrize("cpu_blocks", [None, 4000])
def test_request_texts_are_the_rows_json_encoded(cpu_blocks: int | None) -> None:
    # replay --json writes each request's text without building its dict; it must be json.dumps of the row.
    # At 400 GPU blocks (and 4,000 CPU blocks) the sample evicts from both tiers, so the evicted lists are filled.
    from sim.simulation.replay import run_replay

    outcome = run_replay(open_trace("mooncake-synthetic"), ReplayTiers(400, cpu_blocks))
    rows = list(outcome.request_rows())
    assert any(r["evicted"] for r in rows) and any(r["tier_hits"] for r in rows) == bool(cpu_blocks)
    assert list(outcome.request_texts()) == [json.dumps(r) for r in rows]


def test_a_storage_tier_behind_the_cpu_serves_what_both_evicted(tmp_path: Path) -> None:
    # 4-token blocks, 9-token prompts (2 full blocks and a partial one), 3 usable GPU blocks, a CPU tier of 2
    # one-block chunks (LRU), an nvme tier of 100 tokens (25 chunks) behind it.
    # r0 [1, 2]: computed; chunks 1 and 2 go to the CPU and on to nvme.
    # r1 [3, 4]: takes all 3 GPU blocks (r0's evicted); its chunks evict 1 and 2 from the CPU; nvme keeps all four.
    # r2 [1, 2]: the GPU and the CPU miss; nvme holds both chunks: (9 - 1) // 4 = 2 blocks = 8 tokens loaded from it,
    #   1 computed.
    # Blocks asked per tier: every request's 2 full blocks reach each tier (nothing hits before nvme): 6, 6, 6;
    # hits 0, 0 and r2's 2 on nvme.
    trace = trace_of((9, [1, 2, 10]), (9, [3, 4, 11]), (9, [1, 2, 10]))  # the third id: the partial block's
    nvme = OffloadTier("nvme", "disk", 100, load_ms_per_token=0.0)
    result = replay(trace, ReplayTiers(gpu_blocks=3, cpu_blocks=2, storage=(nvme,)))
    reqs = result["requests"]
    assert result["run"] == "gpu+cpu+nvme"
    assert [(r["gpu_hit_tokens"], r["cpu_hit_tokens"], r["disk_hit_tokens"], r["computed_tokens"]) for r in reqs] == [
        (0, 0, 0, 9), (0, 0, 0, 9), (0, 0, 8, 1),
    ]
    assert reqs[2]["tier_hits"] == {"nvme": 8}
    assert [(t["name"], t["capacity_blocks"], t["lookup_blocks"], t["hit_blocks"]) for t in result["tiers"]] == [
        ("gpu", 3, 6, 0), ("cpu", 2, 6, 0), ("nvme", 25, 6, 2),
    ]
    assert result["totals"]["tier_hits"] == {"nvme": 8} and result["totals"]["disk_hit_tokens"] == 8
    # The tier's load cost is in r2's TTFT: 8 tokens at 10 ms each add 80 ms.
    dear = replay(trace, ReplayTiers(gpu_blocks=3, cpu_blocks=2, storage=(replace(nvme, load_ms_per_token=10.0),)))
    assert round(dear["requests"][2]["ttft_ms"] - reqs[2]["ttft_ms"], 3) == 80.0
    # The command line: a row per tier, and the JSON as replay() gives it.
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps({"timestamp": i, "input_length": 9, "output_length": 1, "hash_ids": ids})
                              for i, ids in enumerate([[1, 2, 10], [3, 4, 11], [1, 2, 10]])))
    args = ["replay", str(path), "--block-size", "4", "--gpu-blocks", "3", "--cpu-blocks", "2",
            "--storage-tier", "nvme:100t:lru:0", "--no-save"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    assert next(ln for ln in out.output.splitlines() if ln.startswith("nvme")).split() == ["nvme", "25", "6", "2", "0.3333"]
    printed = json.loads(CliRunner().invoke(main, [*args, "--json", "--no-explain"]).output)
    assert [r["tier_hits"] for r in printed["requests"]] == [{}, {}, {"nvme": 8}]
    refused = CliRunner().invoke(main, [*args[:-3], "--storage-tier", "nvme:8", "--no-save"])
    assert refused.exit_code == 2 and "--storage-tier" in refused.output and "in tokens" in refused.output
    no_cpu = CliRunner().invoke(main, [*args[:6], "--storage-tier", "nvme:100t", "--no-save"])
    assert no_cpu.exit_code == 2 and "needs a CPU tier" in no_cpu.output
